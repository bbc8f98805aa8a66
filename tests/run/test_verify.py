"""Hostile verifiers (``--score CMD``): real /bin/sh processes through the local sandbox; each must end as a
recorded score, with nothing of it left running and forkpoint's memory and time bounded."""

from __future__ import annotations

import os
import resource
import shutil
import time
from pathlib import Path

import pytest

from forkpoint.run.scoring import ScoreSpec
from forkpoint.run.verify import run_verifier
from forkpoint.sandbox import local_sandbox


def _alive(pid: int) -> bool:
    try:
        return b") Z" not in Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False


def test_the_reward_is_read_in_the_workspace(tmp_path: Path) -> None:
    (tmp_path / "answer").write_text("0.25\n")
    score = run_verifier(ScoreSpec("echo checking; cat answer"), local_sandbox(tmp_path))
    assert score["reward"] == 0.25 and score["exit"] == 0 and score["failure"] is None
    assert "checking" in score["output_tail"]


def test_the_verifier_sees_only_the_allowlisted_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "canary-secret")
    score = run_verifier(ScoreSpec("env"), local_sandbox(tmp_path))
    assert "canary-secret" not in score["output_tail"] and score["reward"] == 1.0


def test_a_daemon_the_verifier_forks_does_not_survive(tmp_path: Path) -> None:
    command = "setsid sh -c 'sleep 300 & echo $! > daemon.pid; wait' >/dev/null 2>&1 & sleep 0.3; echo 1"
    score = run_verifier(ScoreSpec(command), local_sandbox(tmp_path))
    assert score["reward"] == 1.0 and score["background_killed"] is True
    pid = int((tmp_path / "daemon.pid").read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid)


def test_a_verifier_printing_a_gigabyte_is_bounded(tmp_path: Path) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    score = run_verifier(ScoreSpec("head -c 1000000000 /dev/zero | tr '\\0' 'x'; echo; echo 0.5", timeout_s=120),
                         local_sandbox(tmp_path))
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert score["reward"] == 0.5 and score["failure"] is None
    assert len(score["output_tail"]) <= 4096
    assert grown_kib < 64 * 1024, f"forkpoint grew {grown_kib} KiB"
    assert time.monotonic() - started < 120
    assert os.listdir(tmp_path) == []  # nothing was logged into the workspace


@pytest.mark.parametrize("line", ["NaN", "inf", "1e309"])
def test_a_verifier_printing_a_non_finite_number_is_a_score_failure(tmp_path: Path, line: str) -> None:
    score = run_verifier(ScoreSpec(f"echo {line}"), local_sandbox(tmp_path))
    assert score["reward"] is None and "not a finite number" in score["failure"]


def test_a_verifier_that_does_not_exist_is_a_score_failure(tmp_path: Path) -> None:
    score = run_verifier(ScoreSpec("/nonexistent/verifier --check"), local_sandbox(tmp_path))
    assert score["reward"] is None and score["exit"] == 127 and "did not run" in score["failure"]


def test_a_verifier_that_hangs_is_killed_at_the_score_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    score = run_verifier(ScoreSpec("echo $$ > sh.pid; sleep 300; echo 1", timeout_s=1.0), local_sandbox(tmp_path))
    assert time.monotonic() - started < 10
    assert score["reward"] is None and score["exit"] is None and "--score-timeout" in score["failure"]
    assert not _alive(int((tmp_path / "sh.pid").read_text()))


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_under_bwrap_the_verifier_writes_only_its_workspace(tmp_path: Path) -> None:
    """The verifier runs in the run's sandbox: under bwrap it sees the workspace at the recorded cwd, writable, and
    cannot write a host folder outside it (the file system is read-only there)."""
    from forkpoint.sandbox.bwrap import BwrapSandbox

    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    command = f"pwd > where.txt; echo planted > {outside}/planted.txt; echo 1"
    score = run_verifier(ScoreSpec(command), BwrapSandbox(workspace, "/srv/recorded/project"))
    assert score["reward"] == 1.0, score
    assert (workspace / "where.txt").read_text().strip() == "/srv/recorded/project"
    assert not (outside / "planted.txt").exists()


def test_the_original_reward_is_read_only_from_a_scored_replay(tmp_path: Path) -> None:
    """``--original-reward RUN_DIR``: the reward of a scored replay-only run; a run without one is refused by name."""
    from forkpoint.core.errors import ReplayError
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request
    from forkpoint.run.verify import original_reward_of
    from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

    workspace = tmp_path / "ws"
    workspace.mkdir()
    builder = ClaudeSessionBuilder(cwd=str(workspace))
    builder.user_prompt("one step")
    builder.assistant([tool_use("t1", "Bash", {"command": "echo 0.25 > r.txt"})])
    builder.results({"t1": ""})
    builder.assistant([text("done")])
    session = builder.write(tmp_path / "s.jsonl")
    for run_id, score in (("scored", "cat r.txt"), ("unscored", None), ("failed-score", "echo inf")):
        execute(build_request({"agent": "claude-code", "trajectory": str(session), "after_step": "all",
                               "replay_only": True, "workspace": str(workspace), "state_dir": str(tmp_path / "st"),
                               "output_dir": str(tmp_path / "out"), "run_id": run_id, "score": score},
                              source="test"))
    assert original_reward_of(tmp_path / "out" / "scored") == 0.25
    with pytest.raises(ReplayError, match="was not scored"):
        original_reward_of(tmp_path / "out" / "unscored")
    with pytest.raises(ReplayError, match="has no reward"):
        original_reward_of(tmp_path / "out" / "failed-score")
    with pytest.raises(ReplayError, match=r"has no result\.json"):
        original_reward_of(tmp_path / "nowhere")
