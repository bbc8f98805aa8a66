"""Crash safety: SIGKILL the engine at random points of a replay, then rerun with the same state dir.

The rerun (same --state-dir and --run-id, a NEW --output-dir) must either complete cleanly or refuse with
ambiguous_execution (exit 31); no call runs twice silently (each command appends a line to a marker file),
every JSON file in any output dir parses, and an existing output dir is never overwritten.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from forkpoint.run.journal import read_events
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

SLOW = os.environ.get("HYPOTHESIS_PROFILE") == "slow"
BATCHES = 20
KILLS = 100 if SLOW else 8
EXIT_AMBIGUOUS = 31


def _session(tmp: Path, marker: Path) -> tuple[Path, Path]:
    workspace = tmp / "ws"
    workspace.mkdir()
    builder = ClaudeSessionBuilder(cwd=str(workspace))
    builder.user_prompt("Do the task.")
    for index in range(1, BATCHES + 1):
        tool_id = f"toolu_{index:04d}"
        command = f"echo call-{index} >> {marker} && sleep 0.01 && echo {index}"
        builder.assistant([text(f"step {index}"), tool_use(tool_id, "Bash", {"command": command})])
        builder.results({tool_id: f"{index}\n"})
    builder.assistant([text("Done.")])
    return builder.write(tmp / "session.jsonl"), workspace


def _command(session: Path, workspace: Path, state: Path, output: Path) -> list[str]:
    return [sys.executable, "-m", "forkpoint.cli", "replay", "--agent", "claude-code", "--trajectory", str(session),
            "--after-step", str(BATCHES), "--replay-only", "--workspace", str(workspace), "--state-dir", str(state),
            "--output-dir", str(output), "--run-id", "crash", "--json"]


def _snapshot(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def _assert_outputs_whole(root: Path) -> None:
    for path in root.rglob("*.json"):
        json.loads(path.read_text())  # no half-written file: writes are atomic
    for path in root.rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            json.loads(line)


def _one_round(tmp: Path, delay: float) -> str:
    tmp.mkdir()
    marker = tmp / "marker.log"
    session, workspace = _session(tmp, marker)
    state, first_out, second_out = tmp / "state", tmp / "out1", tmp / "out2"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(_command(session, workspace, state, first_out), env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        first_rc = process.wait(timeout=delay)
        killed = False
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        first_rc = process.wait(timeout=60)
        killed = True
    time.sleep(0.05)  # a command the kill orphaned may still append its line
    before = Counter(marker.read_text().splitlines()) if marker.exists() else Counter()
    assert all(count == 1 for count in before.values()), before
    first_snapshot = _snapshot(first_out) if first_out.exists() else {}
    journal = state / "crash" / "journal.jsonl"
    events = [e.get("event") for e in read_events(journal)] if journal.exists() else []
    terminal = "run_finished" in events or "run_failed" in events

    rerun = subprocess.run(_command(session, workspace, state, second_out), env=env, capture_output=True,
                           timeout=120, check=False)
    after = Counter(marker.read_text().splitlines()) if marker.exists() else Counter()
    if first_out.exists():
        _assert_outputs_whole(first_out)
        assert _snapshot(first_out) == first_snapshot, "the first output dir was modified"
    if second_out.exists():
        _assert_outputs_whole(second_out)

    if terminal or (not killed and first_rc == 0):
        # the first run reached its end (or was killed right after journaling it): the state dir holds executed
        # calls, so reusing the run id must be refused without running anything again
        if before:
            assert rerun.returncode == EXIT_AMBIGUOUS, (rerun.returncode, rerun.stdout[-2000:])
            assert after == before, "a rerun of a finished run id executed calls again"
        return "finished-first"
    if rerun.returncode == EXIT_AMBIGUOUS:
        assert after == before, "a refused rerun executed calls"
        result = json.loads(rerun.stdout)
        assert result["failure"]["category"] == "ambiguous_execution"
        return "ambiguous"
    assert rerun.returncode == 0, (rerun.returncode, rerun.stdout[-2000:], rerun.stderr[-2000:])
    # completed cleanly: no call ran twice (the crashed run must not have started any call)
    assert all(count == 1 for count in after.values()), after
    assert len(after) == BATCHES
    assert not before, f"calls {sorted(before)} ran before the crash, yet the rerun re-executed them silently"
    return "completed"


def test_sigkill_during_replay_then_rerun(tmp_path: Path) -> None:
    # calibrate: one round = an undisturbed replay plus its rerun, so a replay takes about half of it
    started = time.monotonic()
    assert _one_round(tmp_path / "calibrate", 120.0) == "finished-first"
    duration = time.monotonic() - started
    rng = random.Random(int(os.environ.get("FORKPOINT_CRASH_SEED", "9")))
    outcomes = Counter(_one_round(tmp_path / f"kill-{n}", rng.uniform(0.0, duration / 2)) for n in range(KILLS))
    assert outcomes["ambiguous"] + outcomes["completed"] >= 1, outcomes


def test_existing_output_dir_is_never_overwritten(tmp_path: Path) -> None:
    marker = tmp_path / "marker.log"
    session, workspace = _session(tmp_path, marker)
    state, out = tmp_path / "state", tmp_path / "out"
    (out / "crash").mkdir(parents=True)
    (out / "crash" / "result.json").write_text('{"mine": true}')
    done = subprocess.run(_command(session, workspace, state, out), capture_output=True, timeout=120, check=False)
    assert done.returncode != 0
    assert (out / "crash" / "result.json").read_text() == '{"mine": true}'
    assert not marker.exists(), "a refused run executed calls"


pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="SIGKILL/process semantics measured on Linux")
