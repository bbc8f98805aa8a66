"""Hostile trajectories (issue 15, classes 1 and 4): ids that would become paths or argv, and oversized files.

Every case edits a copy of a committed fixture in ``tmp_path`` and runs the real engine (and the real CLI in a
child process): a crafted session id is a trajectory error (exit 10) naming the field, in every mode, before the
output or state dir exists, and nothing at all is written outside them. SWE-agent's run-replay files carry a
path-like ``problem_statement.id`` legitimately: there the prefix gets a derived name inside the output dir. An
oversized trajectory is refused with a message that states the bound, without its bytes reaching memory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from forkpoint.core.results import ReplayResult
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request

FIXTURES = Path(__file__).parents[1] / "fixtures"
DEFAULT_BOUND = 256 * 1024 * 1024

#: agent -> (committed fixture, the name its copy gets, the field a refusal must name)
SESSION_IDS: dict[str, tuple[str, str, str]] = {
    "claude-code": ("claude_code/2.1.332/single_bash/session.jsonl", "session.jsonl", "sessionId"),
    # not named rollout-*.jsonl, so the rollout name is built from the id (the path the id would reach)
    "codex": ("codex/0.171.0/exec_basic/rollout.jsonl", "recording.jsonl", "session_meta.id"),
    "opencode": ("opencode/1.18.33/bash_basic/export.json", "export.json", "session id"),
    "pi": ("pi/0.83.0/single_bash/session.jsonl", "session.jsonl", "session header id"),
    # the id names the rebuilt ``<id>.jsonl`` and the ``--resume`` argument
    "qwen-code": ("qwen_code/0.24.4/tools/session.jsonl", "session.jsonl", "session id"),
}
EVERY_AGENT: dict[str, str] = {
    **{agent: fixture for agent, (fixture, _, _) in SESSION_IDS.items()},
    "mini-swe-agent": "mini_swe_agent/2.4.6/basic/trajectory.traj.json",
    "swe-agent": "swe_agent/1.1.0/shell_state/toy__shell_state-1.traj",
    "openhands": "openhands/0.62.0/basic/trajectory.json",
}


def hostile_values(tmp_path: Path) -> dict[str, str]:
    return {
        "traversal": "../../x",
        "deep-traversal": "../../../../escaped",  # from <out>/<run>/native/prefix up to tmp_path
        "absolute": str(tmp_path / "abs-target"),
        "leading-dash": "-rf",
        "nul": "a\x00b",
        "overlong": "a" * 1000,
        "dotdot": "..",
    }


# -- helpers -------------------------------------------------------------------------------------------------------


def tree(root: Path) -> set[str]:
    """Every path under ``root`` (files, directories, links), relative."""
    found: set[str] = set()
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            found.add(os.path.relpath(os.path.join(directory, name), root))
    return found


def session_id_of(agent: str, text: str) -> str:
    first = json.loads(text.splitlines()[0]) if agent != "opencode" else json.loads(text)
    if agent == "claude-code":
        match = re.search(r'"sessionId":"([^"]+)"', text)
        assert match
        return match.group(1)
    if agent == "codex":
        return str(first["payload"]["id"])
    if agent == "opencode":
        return str(first["info"]["id"])
    if agent == "qwen-code":
        return str(first["sessionId"])
    return str(first["id"])  # pi: the session header


def with_session_id(tmp_path: Path, agent: str, value: str) -> Path:
    """A copy of the agent's fixture whose session id is ``value`` everywhere it appears."""
    fixture, name, _ = SESSION_IDS[agent]
    text = (FIXTURES / fixture).read_text("utf-8")
    original = session_id_of(agent, text)
    escaped = json.dumps(value)[1:-1]
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    target = folder / name
    target.write_text(text.replace(original, escaped), "utf-8")
    return target


def run(tmp_path: Path, agent: str, trajectory: Path, **values: Any) -> ReplayResult:
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    request = {"agent": agent, "trajectory": str(trajectory), "after_step": 1, "workspace": str(workspace),
               "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"), "run_id": "hostile",
               **values}
    return execute(build_request(request, source="test"))


#: runs the CLI and records the peak RSS of its own address space (VmHWM: reset at exec, unlike ru_maxrss, which a
#: child started from this big pytest process inherits from the parent's address space at exec)
_MEASURED_CLI = """
import atexit, os, sys
def _report():
    with open("/proc/self/status") as status:
        hwm = next(line.split()[1] for line in status if line.startswith("VmHWM:"))
    with open(os.environ["FORKPOINT_TEST_HWM_FILE"], "w") as out:
        out.write(hwm)
atexit.register(_report)
sys.argv = ["forkpoint", *sys.argv[1:]]
from forkpoint.cli import main
main()
"""


def cli(*args: str, cwd: Path) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in bytes) of the forkpoint CLI with ARGS in a child process."""
    hwm = cwd / "hwm.txt"
    done = subprocess.run([sys.executable, "-c", _MEASURED_CLI, *args], cwd=cwd, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, env={**os.environ, "FORKPOINT_TEST_HWM_FILE": str(hwm)},
                          timeout=300, check=False)
    peak = int(hwm.read_text()) * 1024
    hwm.unlink()
    return done.returncode, done.stderr.decode("utf-8", "replace"), peak


def assert_refused(result: ReplayResult, field: str) -> None:
    assert result.exit_code == 10, result.failure
    assert result.failure is not None and result.failure.category == "trajectory_error"
    assert field in result.failure.message, result.failure.message
    assert "cannot be used as a file name or argument" in result.failure.message


# -- class 1: ids that become paths or argv -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["prepare_only", "replay_only"])
@pytest.mark.parametrize("kind", list(hostile_values(Path("/x"))))
@pytest.mark.parametrize("agent", list(SESSION_IDS))
def test_a_crafted_session_id_is_refused_before_anything_is_written(
    agent: str, kind: str, mode: str, tmp_path: Path
) -> None:
    value = hostile_values(tmp_path)[kind]
    trajectory = with_session_id(tmp_path, agent, value)
    (tmp_path / "ws").mkdir()
    before = tree(tmp_path)
    result = run(tmp_path, agent, trajectory, **{mode: True})
    assert_refused(result, SESSION_IDS[agent][2])
    assert tree(tmp_path) == before  # no output dir, no state dir, no escaped file
    assert not (tmp_path / "out").exists() and not (tmp_path / "state").exists()
    assert not list(tmp_path.glob("escaped*")) and not list(tmp_path.glob("abs-target*"))


def test_a_crafted_pi_header_timestamp_is_refused(tmp_path: Path) -> None:
    """Pi names the session file ``<timestamp>_<id>.jsonl``: the timestamp reaches the path too."""
    fixture, name, _ = SESSION_IDS["pi"]
    lines = (FIXTURES / fixture).read_text("utf-8").splitlines()
    header = json.loads(lines[0])
    header["timestamp"] = str(tmp_path / "abs-target")
    (tmp_path / "in").mkdir()
    trajectory = tmp_path / "in" / name
    trajectory.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n", "utf-8")
    (tmp_path / "ws").mkdir()
    before = tree(tmp_path)
    result = run(tmp_path, "pi", trajectory, prepare_only=True)
    assert_refused(result, "session header timestamp")
    assert tree(tmp_path) == before


def test_a_claude_session_named_only_by_its_file_is_checked_too(tmp_path: Path) -> None:
    """Without a sessionId the file name is the session id (`claude --resume <name>`): '-x' would be an option."""
    fixture, _, _ = SESSION_IDS["claude-code"]
    lines = [json.loads(line) for line in (FIXTURES / fixture).read_text("utf-8").splitlines()]
    (tmp_path / "in").mkdir()
    trajectory = tmp_path / "in" / "-x.jsonl"
    trajectory.write_text("".join(json.dumps({k: v for k, v in line.items() if k != "sessionId"}) + "\n"
                                  for line in lines), "utf-8")
    (tmp_path / "ws").mkdir()
    result = run(tmp_path, "claude-code", trajectory, prepare_only=True)
    assert_refused(result, "the file name")
    assert not (tmp_path / "out").exists()


def test_a_codex_call_id_with_a_nul_is_refused_before_it_reaches_an_environment(tmp_path: Path) -> None:
    """Codex passes the call id to the replayed command as CODEX_TOOL_CALL_ID: a NUL would fail mid-run."""
    fixture, name, _ = SESSION_IDS["codex"]
    text = (FIXTURES / fixture).read_text("utf-8").replace("call_pUvqoQyPryidNhKHXvpus7Wv", "call_\\u0000x")
    (tmp_path / "in").mkdir()
    trajectory = tmp_path / "in" / name
    trajectory.write_text(text, "utf-8")
    (tmp_path / "ws").mkdir()
    result = run(tmp_path, "codex", trajectory, replay_only=True)
    assert result.exit_code == 10 and result.failure is not None
    assert "call_id" in result.failure.message and "NUL" in result.failure.message
    assert not (tmp_path / "out").exists() and not (tmp_path / "state").exists()


@pytest.mark.parametrize("agent", list(SESSION_IDS))
def test_the_cli_refuses_a_crafted_id_in_replay_and_inspect(agent: str, tmp_path: Path) -> None:
    trajectory = with_session_id(tmp_path, agent, "../../../../escaped")
    (tmp_path / "ws").mkdir()
    before = tree(tmp_path)
    field = SESSION_IDS[agent][2]
    code, stderr, _ = cli("replay", "--agent", agent, "--trajectory", str(trajectory), "--after-step", "1",
                          "--prepare-only", "--workspace", "ws", "--output-dir", "out", "--state-dir", "state",
                          cwd=tmp_path)
    assert (code, "trajectory_error") == (10, stderr.split(":")[1].strip()), stderr
    assert field in stderr
    code, stderr, _ = cli("inspect", "--agent", agent, str(trajectory), cwd=tmp_path)
    assert code == 10 and field in stderr, stderr
    assert tree(tmp_path) == before


@pytest.mark.parametrize("kind", list(hostile_values(Path("/x"))))
def test_swe_agent_path_like_problem_statement_id_gets_a_derived_name(kind: str, tmp_path: Path) -> None:
    """SWE-agent run-replay files store problem_statement.id as an absolute path: never refused, never followed."""
    value = hostile_values(tmp_path)[kind] if kind != "absolute" else str(tmp_path / "tasks" / "issue 7.md")
    document = json.loads((FIXTURES / EVERY_AGENT["swe-agent"]).read_text("utf-8"))
    config = json.loads(document["replay_config"])
    config["problem_statement"]["id"] = value
    document["replay_config"] = json.dumps(config)
    (tmp_path / "in").mkdir()
    trajectory = tmp_path / "in" / "run.traj"
    trajectory.write_text(json.dumps(document, indent=2), "utf-8")
    (tmp_path / "ws").mkdir()
    (tmp_path / "tasks").mkdir()
    before = tree(tmp_path)
    result = run(tmp_path, "swe-agent", trajectory, prepare_only=True)
    assert result.failure is None and result.exit_code == 0, result.failure
    assert result.metadata["native_session_id"] == value  # the original, kept in the metadata
    prefix_dir = tmp_path / "out" / "hostile" / "native" / "prefix"
    (written,) = prefix_dir.iterdir()
    assert written.suffix == ".traj" and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._-]*", written.name)
    assert len(written.name) <= 140
    if kind == "absolute":
        assert written.name.startswith("issue_7.md-")  # the basename, made safe, plus a short hash
    assert {artifact.path for artifact in result.artifacts if artifact.role == "native_prefix"} <= {str(written)}
    new = {path for path in tree(tmp_path) - before if not path.startswith(("out", "state"))}
    assert new == set(), new
    assert list((tmp_path / "tasks").iterdir()) == []


def test_swe_agent_replay_only_writes_the_derived_name_inside_the_output_dir(tmp_path: Path) -> None:
    from forkpoint.testing.recordings import restored_workspace

    value = str(tmp_path / "tasks" / "task.md")
    source = FIXTURES / EVERY_AGENT["swe-agent"]
    document = json.loads(source.read_text("utf-8"))
    config = json.loads(document["replay_config"])
    config["problem_statement"]["id"] = value
    document["replay_config"] = json.dumps(config)
    trajectory = tmp_path / "run.traj"
    trajectory.write_text(json.dumps(document, indent=2), "utf-8")
    (tmp_path / "tasks").mkdir()
    with restored_workspace(source.parent) as workspace:
        request = {"agent": "swe-agent", "trajectory": str(trajectory), "after_step": 1,
                   "workspace": str(workspace), "state_dir": str(tmp_path / "state"),
                   "output_dir": str(tmp_path / "out"), "run_id": "hostile", "replay_only": True}
        result = execute(build_request(request, source="test"))
    assert result.failure is None, result.failure
    assert result.metadata["native_session_id"] == value
    (written,) = (tmp_path / "out" / "hostile" / "native" / "prefix").iterdir()
    assert written.name.startswith("task.md-") and written.name.endswith(".traj")
    assert list((tmp_path / "tasks").iterdir()) == []


@pytest.mark.parametrize("agent", ["mini-swe-agent", "openhands"])
def test_hostile_tool_call_ids_reach_no_path(agent: str, tmp_path: Path) -> None:
    """These formats' ids (tool call ids; the file name) never become a path: the run stays in the output dir."""
    text = (FIXTURES / EVERY_AGENT[agent]).read_text("utf-8")
    for index, call_id in enumerate(sorted(set(re.findall(r"call_[A-Za-z0-9]+", text)))):
        text = text.replace(call_id, f"../../../../escaped-{index}")
    (tmp_path / "in").mkdir()
    trajectory = tmp_path / "in" / ("-rf.json" if agent == "openhands" else "-rf.traj.json")
    trajectory.write_text(text, "utf-8")
    (tmp_path / "ws").mkdir()
    before = tree(tmp_path)
    result = run(tmp_path, agent, trajectory, prepare_only=True)
    assert result.failure is None, result.failure
    new = {path for path in tree(tmp_path) - before if not path.startswith(("out", "state"))}
    assert new == set(), new
    (written,) = (tmp_path / "out" / "hostile" / "native" / "prefix").iterdir()
    assert written.name.startswith("-rf")


# -- class 4: unbounded input ---------------------------------------------------------------------------------------


def _oversized(tmp_path: Path, agent: str, size: int) -> Path:
    """The fixture's bytes, then a sparse tail up to ``size`` (cheap on disk, heavy for a parser that reads it)."""
    source = FIXTURES / EVERY_AGENT[agent]
    (tmp_path / "in").mkdir(exist_ok=True)
    target = tmp_path / "in" / source.name
    shutil.copyfile(source, target)
    os.truncate(target, size)
    return target


def _honest_rss(tmp_path: Path, agent: str) -> int:
    code, stderr, rss = cli("inspect", "--agent", agent, str(FIXTURES / EVERY_AGENT[agent]), cwd=tmp_path)
    assert code == 0, stderr
    return rss


@pytest.mark.parametrize("agent", list(EVERY_AGENT))
def test_an_oversized_trajectory_is_refused_with_the_bound_named(agent: str, tmp_path: Path) -> None:
    bound = 1_000_000
    trajectory = _oversized(tmp_path, agent, 5_000_000)
    (tmp_path / "ws").mkdir()
    baseline = _honest_rss(tmp_path, agent)
    for command in (
        ["replay", "--agent", agent, "--trajectory", str(trajectory), "--after-step", "1", "--prepare-only",
         "--workspace", "ws", "--output-dir", "out", "--state-dir", "state"],
        ["replay", "--agent", agent, "--trajectory", str(trajectory), "--after-step", "1", "--replay-only",
         "--workspace", "ws", "--output-dir", "out", "--state-dir", "state"],
        ["inspect", "--agent", agent, str(trajectory)],
    ):
        code, stderr, rss = cli(*command, "--max-trajectory-bytes", str(bound), cwd=tmp_path)
        assert code == 10, stderr
        assert "trajectory_error" in stderr and "5000000 bytes" in stderr, stderr
        assert f"bound of {bound} bytes" in stderr and "--max-trajectory-bytes" in stderr, stderr
        # the refused file never reaches memory: no more than an honest small inspect, within 2x the bound
        assert rss < baseline + 2 * bound, (rss, baseline)
    assert not (tmp_path / "out").exists() and not (tmp_path / "state").exists()


@pytest.mark.parametrize("agent", list(EVERY_AGENT))
def test_a_600_mb_trajectory_is_refused_at_the_default_bound_in_bounded_memory(agent: str, tmp_path: Path) -> None:
    trajectory = _oversized(tmp_path, agent, 600_000_000)
    try:
        code, stderr, rss = cli("inspect", "--agent", agent, str(trajectory), cwd=tmp_path)
    finally:
        trajectory.unlink()
    assert code == 10, stderr
    assert f"bound of {DEFAULT_BOUND} bytes" in stderr and "--max-trajectory-bytes" in stderr, stderr
    assert rss < 2 * DEFAULT_BOUND
    assert rss < 150 * 1024 * 1024, rss  # far below the file: its bytes were never read


def test_the_bound_is_a_request_key(tmp_path: Path) -> None:
    trajectory = _oversized(tmp_path, "claude-code", 2_000_000)
    (tmp_path / "ws").mkdir()
    result = run(tmp_path, "claude-code", trajectory, prepare_only=True, max_trajectory_bytes=1_000_000)
    assert result.exit_code == 10 and result.failure is not None
    assert "bound of 1000000 bytes" in result.failure.message
    honest = FIXTURES / EVERY_AGENT["claude-code"]
    raised = run(tmp_path, "claude-code", honest, prepare_only=True, max_trajectory_bytes=honest.stat().st_size,
                 run_id="exact")
    assert raised.failure is None, raised.failure  # a file exactly at the bound is accepted

