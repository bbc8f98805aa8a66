"""Concurrency: 8 real ``forkpoint replay`` processes at once on one machine, sharing the agent runtime cache.

Replay-only runs of recorded fixtures (Claude Code and Codex, both versions) and continuations through their own
ScriptedModel, each in its own workspace (``--workspace-from`` the fixture's initial workspace, ``--path-map``
from the recorded cwd), once with separate state/output roots per run and once with ONE state root and ONE
output root shared by all runs (different run ids). Every run must complete; each output must match its own
input (its trajectory's hash and session, every fresh observation equal to ITS recording, its own upstream
seeing its own boundary); no state lock may stay held and no process of any run may outlive it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.adapters.codex.parse import parse_rollout
from forkpoint.core.model import Trajectory
from forkpoint.testing import ScriptedModel
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

SLOW = os.environ.get("HYPOTHESIS_PROFILE") == "slow"
ROUNDS = 3 if SLOW else 1
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="flock and /proc checks are Linux")


@dataclass
class Job:
    agent: str
    version: str
    scenario: str
    continue_with: str | None = None  # None: replay-only; else the upstream ScriptedModel plays
    run_id: str = ""
    model: ScriptedModel | None = field(default=None, repr=False)

    @property
    def fixture(self) -> Path:
        return FIXTURES / self.agent.replace("-", "_") / self.version / self.scenario

    @property
    def trajectory(self) -> Path:
        return self.fixture / ("session.jsonl" if self.agent == "claude-code" else "rollout.jsonl")

    def parsed(self) -> Trajectory:
        return parse_session(self.trajectory) if self.agent == "claude-code" else parse_rollout(self.trajectory)


JOBS = [
    Job("claude-code", "2.1.332", "file_tools"),
    Job("claude-code", "2.1.220", "cd_persist"),
    Job("claude-code", "2.1.332", "parallel"),
    Job("codex", "0.149.0", "apply_patch"),
    Job("codex", "0.171.0", "parallel"),
    Job("claude-code", "2.1.332", "single_bash", "anthropic"),
    Job("claude-code", "2.1.220", "large_output", "anthropic"),
    Job("codex", "0.171.0", "exec_basic", "openai-responses"),
]


def _argv(job: Job, tmp: Path, state: Path, out: Path, after: int, url: str | None) -> list[str]:
    recorded = json.loads((job.fixture / "meta.json").read_text())["cwd"]
    workspace = tmp / f"ws-{job.run_id}"
    argv = [sys.executable, "-m", "forkpoint.cli", "replay", "--agent", job.agent, "--trajectory",
            str(job.trajectory), "--after-step", str(after), "--workspace", str(workspace), "--workspace-from",
            str(job.fixture / "workspace-initial"), "--path-map", f"{recorded}={workspace}", "--state-dir",
            str(state), "--output-dir", str(out), "--run-id", job.run_id, "--json"]
    if job.continue_with is None:
        return [*argv, "--replay-only"]
    assert url is not None
    base_url = url if job.agent == "claude-code" else f"{url}/v1"
    return [*argv, "--upstream", job.continue_with, "--upstream-url", base_url]


def _lock_free(lock: Path) -> bool:
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # releases the flock we may have taken
    return True


def _processes_mentioning(needle: bytes) -> list[str]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{entry}/{name}", "rb") as handle:
                    if needle in handle.read():
                        found.append(f"{entry} ({name})")
                        break
            except OSError:
                continue
    return found


def _check_own_output(job: Job, result: dict[str, object], out_root: Path, after: int) -> None:
    trajectory = job.parsed()
    metadata = result["metadata"]
    assert isinstance(metadata, dict)
    assert result["run_id"] == job.run_id and result["failure"] is None, result
    assert Path(str(result["output_dir"])) == out_root / job.run_id
    assert metadata["source_sha256"] == hashlib.sha256(job.trajectory.read_bytes()).hexdigest()
    assert metadata["native_session_id"] == trajectory.session_id
    output = out_root / job.run_id
    prefix = list((output / "native" / "prefix").glob("*.jsonl"))
    assert len(prefix) == 1 and str(trajectory.session_id) in prefix[0].name
    rows = json.loads((output / "observations.json").read_text())["observations"]
    expected_ids = [call.call_id for batch in trajectory.batches[:after] for call in batch.calls]
    assert sorted(row["id"] for row in rows) == sorted(expected_ids)
    assert all(row["exact"] for row in rows), rows  # every fresh observation equals ITS recording
    if job.continue_with is None:
        assert result["phase"] == "replayed"
        return
    assert result["phase"] == "continued" and result["agent_status"] == "completed", result
    assert job.model is not None
    main = [entry for entry in job.model.requests if entry.get("kind") == "main"]
    assert main, "this run's upstream saw no model request"
    body = json.dumps(main[0]["body"])
    boundary = [row["id"] for row in rows if row["batch"] == after]
    assert all(call_id in body for call_id in boundary)  # its own first request carries its own boundary
    next_action = json.loads((output / "next-action.json").read_text())
    assert next_action["metrics"]["same_tool_calls"] is True, next_action


def _round(tmp: Path, shared: bool, round_index: int) -> None:
    for job in JOBS:
        agent_version = runtimes.find(job.agent, job.version)
        if agent_version is None:
            pytest.skip(f"{job.agent} {job.version} is not installed")
    processes: list[tuple[Job, int, Path, subprocess.Popen[bytes]]] = []
    env = {**os.environ, "ANTHROPIC_API_KEY": "scripted-upstream-key", "OPENAI_API_KEY": "scripted-upstream-key"}
    with ExitStack() as stack:
        for index, template in enumerate(JOBS):
            job = Job(template.agent, template.version, template.scenario, template.continue_with,
                      run_id=f"r{round_index}-{index}-{template.scenario}")
            root = tmp if shared else tmp / job.run_id
            url = None
            after = job.parsed().complete_count if job.continue_with is None else 1
            if job.continue_with is not None:
                job.model = ScriptedModel.from_file(job.fixture / "script.json")
                url = stack.enter_context(job.model.serve())
            argv = _argv(job, tmp, root / "state", root / "out", after, url)
            processes.append((job, after, root, subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                                                  stderr=subprocess.PIPE)))
        try:
            outputs = [(job, after, root, *process.communicate(timeout=600), process.returncode)
                       for job, after, root, process in processes]
        finally:
            for _, _, _, process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
    for job, after, root, stdout, stderr, code in outputs:
        assert code == 0, (job.run_id, code, stdout[-2000:], stderr[-2000:])
        _check_own_output(job, json.loads(stdout), root / "out", after)
        lock = root / "state" / job.run_id / "run.lock"
        assert lock.exists() and _lock_free(lock), f"{job.run_id}: its state lock is still held"
    if shared:
        assert sorted(path.name for path in (tmp / "out").iterdir()) == sorted(job.run_id for job, *_ in outputs)


@pytest.fixture
def marker_free(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
    # every run's workspace, state and HOME live under tmp_path: no process may still mention it
    assert _processes_mentioning(str(tmp_path).encode()) == []


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("shared", [False, True], ids=["separate-roots", "shared-roots"])
def test_eight_replays_at_once(marker_free: Path, shared: bool) -> None:
    for round_index in range(ROUNDS):
        _round(marker_free / f"round-{round_index}", shared, round_index)


def test_same_run_id_at_once_runs_every_call_once(marker_free: Path) -> None:
    """Four processes race for ONE run id in one state root: one replays, the others refuse (exit 31)."""
    tmp = marker_free
    workspace, marker = tmp / "ws", tmp / "calls.log"
    workspace.mkdir()
    builder = ClaudeSessionBuilder(cwd=str(workspace))
    builder.user_prompt("Go.")
    for index in range(1, 6):
        builder.assistant([tool_use(f"toolu_{index}", "Bash", {"command": f"echo {index} >> {marker}; sleep 0.1"})])
        builder.results({f"toolu_{index}": "(Bash completed with no output)"})
    builder.assistant([text("Done.")])
    session = builder.write(tmp / "session.jsonl")
    processes = [
        subprocess.Popen([sys.executable, "-m", "forkpoint.cli", "replay", "--agent", "claude-code", "--trajectory",
                          str(session), "--after-step", "5", "--replay-only", "--workspace", str(workspace),
                          "--state-dir", str(tmp / "state"), "--output-dir", str(tmp / f"out-{n}"), "--run-id",
                          "same", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for n in range(4)
    ]
    codes = []
    for process in processes:
        process.communicate(timeout=300)
        codes.append(process.returncode)
    assert sorted(codes) == [0, 31, 31, 31], codes
    assert Counter(marker.read_text().split()) == Counter({str(n): 1 for n in range(1, 6)})
    assert _lock_free(tmp / "state" / "same" / "run.lock")
