"""Pi's own tools, re-run by forkpoint's Node runner, give the recorded observations on every fixture.

Needs the real runtimes (`forkpoint agents install pi@0.83.0 pi@1.6.0`); the workspace is restored to the recording's
initial state at the recorded path, and every call of every batch runs in order with the recording's enabled tool
set (a call Pi rejected gets Pi's "Tool <name> not found" again). The runner's failures are classified per call:
no answer is an executor failure of that call, ambiguous only when a changing tool may have started.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from forkpoint.adapters.pi import PiAdapter
from forkpoint.adapters.pi.parse import parse_pi
from forkpoint.adapters.pi.runtime import PiRuntime, installed
from forkpoint.adapters.pi.tools import (
    FD_MISSING,
    PROFILE_0_85,
    PROFILES,
    PiToolExecutor,
    profile_for,
    reworded,
)
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import CallPolicy, Mode, Observation, RunContext, ToolCall
from forkpoint.run.plan import select_boundary
from forkpoint.runtimes import find
from forkpoint.runtimes.fd import path_fd
from forkpoint.testing.recordings import restored_workspace

ROOT = Path(__file__).parents[2] / "fixtures" / "pi"
FIXTURES = ROOT / "0.83.0"
SCENARIOS = ("single_bash", "parallel", "file_tools", "error_result", "unknown_tool", "unknown_tools",
             "optional_tools", "long_session")
#: a sample of the 1.6.0 fixtures (read, bash, edit, write; the others pass too, run by hand, and parallel's and
#: optional_tools' calls re-run exactly in tests/e2e/test_pi_continue.py): their tools run with 1.6.0's own
#: implementations (write's text, bash's flagged error)
CASES = [("0.83.0", s) for s in SCENARIOS] + [("1.6.0", s) for s in ("file_tools", "error_result")]

pytestmark = pytest.mark.skipif(find("pi", "0.83.0") is None, reason="pi 0.83.0 is not installed")


@pytest.mark.parametrize(("version", "scenario"), CASES)
def test_fresh_equals_historical(version: str, scenario: str, tmp_path: Path) -> None:
    if find("pi", version) is None:
        pytest.skip(f"pi {version} is not installed")
    parsed = parse_pi(ROOT / version / scenario / "events.jsonl")
    assert PiAdapter().version_facts(parsed).tool_version == version
    plan = select_boundary(parsed, parsed.complete_count, Mode.REPLAY_ONLY, PiAdapter().profile_for(parsed))
    with restored_workspace(ROOT / version / scenario) as workspace:
        context = RunContext(workspace, tmp_path / "state", tmp_path / "out")
        executor = PiAdapter().executor(plan, context)
        try:
            for batch in parsed.batches:
                for call in batch.calls:
                    fresh = executor.run(call)
                    assert call.historical is not None
                    assert (fresh.content, fresh.is_error) == (call.historical.content, call.historical.is_error), call
                    recorded_details = call.native.get("details") if isinstance(call.native, dict) else None
                    assert fresh.native["details"] == recorded_details, call.call_id
                    assert not fresh.truncated
        finally:
            executor.close()


def test_a_rejected_tool_needs_no_process(tmp_path: Path) -> None:
    """Pi's loop answers before any tool runs: no runner is started (a runtime without Node still answers)."""
    runtime = PiRuntime(tmp_path / "none", tmp_path / "none" / "node", "0.83.0")
    executor = PiToolExecutor(RunContext(tmp_path, tmp_path / "state", tmp_path / "out"), runtime)
    fresh = executor.run(ToolCall("c1", "Bash", {"command": "touch x"}, None, CallPolicy.FRESH))
    assert (fresh.content, fresh.is_error) == ([{"type": "text", "text": "Tool Bash not found"}], True)
    assert not (tmp_path / "x").exists()
    enabled = PiToolExecutor(RunContext(tmp_path, tmp_path / "state", tmp_path / "out"), runtime,
                             ("read", "bash", "edit", "write", "grep"))
    assert enabled.run(ToolCall("c2", "ls", {}, None, CallPolicy.FRESH)).content[0]["text"] == "Tool ls not found"


def _dying_runtime(tmp_path: Path, script: str) -> PiRuntime:
    """A runtime whose 'node' is a shell script playing a runner that dies (the executor's failure paths)."""
    root = tmp_path / "runtime"
    root.mkdir()
    node = root / "node"
    node.write_text(f"#!/bin/sh\ncat >/dev/null\n{script}\n")
    node.chmod(0o755)
    return PiRuntime(root, node, "0.83.0")


@pytest.mark.parametrize(("tool", "script", "ambiguous", "stderr"), [
    ("read", "echo 'import failed: boom' >&2; exit 0", False, "import failed: boom"),
    ("bash", "echo 'killed early' >&2; exit 0", False, "killed early"),
    ("read", "echo '{\"started\":true}'; echo 'reading died' >&2; kill -9 $$", False, "reading died"),
    ("bash", "echo '{\"started\":true}'; echo 'bash died' >&2; kill -9 $$", True, "bash died"),
    ("write", "echo '{\"started\":true}'; printf '{\"content\":[{\"type\":\"te'; exit 0", True, "(empty)"),
])
def test_a_runner_without_an_answer_is_an_executor_failure_of_that_call(
        tmp_path: Path, tool: str, script: str, ambiguous: bool, stderr: str) -> None:
    runtime = _dying_runtime(tmp_path, script)
    executor = PiToolExecutor(RunContext(tmp_path, tmp_path / "state", tmp_path / "out"), runtime)
    with pytest.raises(ReplayError) as info:
        executor.run(ToolCall("c1", tool, {"path": "a.txt", "command": "true", "content": "x"}, None,
                              CallPolicy.FRESH))
    error = info.value
    assert error.kind is ErrorKind.EXECUTOR and error.kind.exit_code == 30
    assert error.before_effect is not ambiguous  # only a changing tool that started may have had an effect
    assert f"{tool}(c1)" in error.message and "died without answering" in error.message
    assert f"stderr: {stderr}" in error.message


def test_a_reply_over_64_kib_arrives_whole(tmp_path: Path) -> None:
    """A read of a 3,000-line file: the reply (text + details.truncation) is over 64 KiB and arrives whole."""
    (tmp_path / "big.txt").write_text("".join(f"line {i:04d}: {'x' * 40}\n" for i in range(1, 3001)))
    executor = PiToolExecutor(RunContext(tmp_path, tmp_path / "state", tmp_path / "out"), installed())
    fresh = executor.run(ToolCall("c1", "read", {"path": "big.txt"}, None, CallPolicy.FRESH))
    assert not fresh.is_error and fresh.content[0]["text"].startswith("line 0001: ")
    assert fresh.native["details"]["truncation"]["truncated"] is True
    assert len(orjson.dumps({"content": fresh.content, "details": fresh.native["details"]})) > 65536


def test_find_on_a_host_without_fd_is_refused_before_it_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No forkpoint fd runtime and no fd >= 9 on PATH: a find recorded with an fd cannot re-run as it ran — refused
    before any process (``fd unavailable``, stale fallback); one recorded without any fd re-runs and gets Pi's own
    "fd is not available" again."""
    real = find("pi", "0.83.0")
    assert real is not None
    cache = tmp_path / "runtimes"
    (cache / "pi").mkdir(parents=True)
    (cache / "pi" / "0.83.0").symlink_to(real.root)  # the same Pi, in a cache without the fd runtime
    monkeypatch.setenv("FORKPOINT_RUNTIMES", str(cache))
    if path_fd(os.environ.get("PATH", "")) is not None:
        pytest.skip("this host has an fd >= 9 on PATH")
    parsed = parse_pi(FIXTURES / "optional_tools" / "events.jsonl")
    call = next(c for b in parsed.batches for c in b.calls if c.call_id == "call_opt_2")
    assert call.historical is not None and call.historical.content == [{"type": "text", "text": "src/app.py"}]
    with restored_workspace(FIXTURES / "optional_tools") as workspace:
        context = RunContext(workspace, tmp_path / "state", tmp_path / "out")
        executor = PiToolExecutor(context, installed("0.83.0"), ("read", "bash", "edit", "write", "grep", "find", "ls"))
        assert executor.fd is None
        with pytest.raises(ReplayError, match=r"fd unavailable: Pi's find\(call_opt_2\) needs fd >= 9") as caught:
            executor.run(call)
        assert caught.value.before_effect and caught.value.stale_fallback
        assert not (tmp_path / "state").exists()  # refused before the runner (and its HOME) existed
        without = replace(call, historical=Observation([{"type": "text", "text": FD_MISSING}], True))
        fresh = executor.run(without)
        assert (fresh.content, fresh.is_error) == ([{"type": "text", "text": FD_MISSING}], True)


# -- Pi 0.85.x: read as 0.83.0, its writes worded without the byte count (tools.PROFILE_0_85) -----------------


@pytest.mark.parametrize(("scenario", "source"), [("parallel", "events.jsonl"), ("file_tools", "session.jsonl")])
def test_a_0_85_recording_re_runs_exactly_with_its_own_profile(scenario: str, source: str, tmp_path: Path) -> None:
    """Real 0.85.1 recordings (scripts/record_pi_fixtures.py --version 0.85.1) name no version and read as 0.83.0;
    their own writes' wording picks the 0.85 profile: 0.83.0's binary re-runs the write and its answer is 0.85's
    (``Successfully wrote to P``), exactly the recorded one. (Only the write runs here: every other call of these
    recordings gives 0.83.0's text, which the calibration of 0.85.0 and 0.85.1 checked, 8 of 8.)"""
    parsed = parse_pi(ROOT / "0.85.1" / scenario / source)
    facts = PiAdapter().version_facts(parsed)
    assert (facts.status, facts.tool_version, facts.tool_profile) == ("verified", "0.83.0", PROFILE_0_85.label)
    plan = select_boundary(parsed, parsed.complete_count, Mode.REPLAY_ONLY, PiAdapter().profile_for(parsed))
    write = next(call for batch in parsed.batches for call in batch.calls if call.name == "write")
    assert write.historical is not None and write.historical.content[0]["text"].startswith("Successfully wrote to ")
    with restored_workspace(ROOT / "0.85.1" / scenario) as workspace:
        executor = PiAdapter().executor(plan, RunContext(workspace, tmp_path / "state", tmp_path / "out"))
        assert isinstance(executor, PiToolExecutor) and executor.runtime.version == "0.83.0"
        fresh = executor.run(write)
        assert (fresh.content, fresh.is_error) == (write.historical.content, write.historical.is_error)
        assert (workspace / write.arguments["path"]).read_text() == write.arguments["content"]  # it really ran


def test_the_0_85_profile_is_only_for_recordings_that_show_its_wording() -> None:
    """0.83.0's own recordings (with the byte count) keep 0.83.0's profile; a write whose wording is mixed, a
    failed one, or a 1.x recording (1.6.0's own write already says it) never get it."""
    ours = parse_pi(FIXTURES / "parallel" / "events.jsonl")
    assert PiAdapter().version_facts(ours).tool_profile is None
    theirs = parse_pi(ROOT / "0.85.1" / "parallel" / "events.jsonl")
    calls = [c for b in theirs.batches for c in b.calls]
    write = next(c for c in calls if c.name == "write")
    assert profile_for("0.83.0", calls) is PROFILE_0_85
    assert profile_for("1.6.0", calls) is PROFILES["1.6.0"]
    with_bytes = replace(write, call_id="w2", historical=Observation(
        [{"type": "text", "text": "Successfully wrote 3 bytes to c.txt"}], False))
    assert profile_for("0.83.0", [*calls, with_bytes]) is PROFILES["0.83.0"]
    failed = replace(write, historical=Observation([{"type": "text", "text": "EACCES"}], True))
    assert profile_for("0.83.0", [failed]) is PROFILES["0.83.0"]
    other_path = replace(write, historical=Observation([{"type": "text", "text": "Successfully wrote to x.txt"}],
                                                       False))
    assert profile_for("0.83.0", [other_path]) is PROFILES["0.83.0"]  # not the answer to THIS call's path


def test_the_0_85_wording_changes_only_a_successful_writes_own_answer(tmp_path: Path) -> None:
    write = ToolCall("w1", "write", {"path": "c.txt", "content": "abc"}, None, CallPolicy.FRESH)
    answer = [{"type": "text", "text": "Successfully wrote 3 bytes to c.txt"}]
    assert reworded(PROFILE_0_85, write, answer, False) == [{"type": "text", "text": "Successfully wrote to c.txt"}]
    assert reworded(PROFILES["0.83.0"], write, answer, False) == answer
    assert reworded(PROFILE_0_85, write, answer, True) == answer
    assert reworded(PROFILE_0_85, replace(write, arguments={"path": "d.txt"}), answer, False) == answer
    assert reworded(PROFILE_0_85, replace(write, name="bash"), answer, False) == answer
