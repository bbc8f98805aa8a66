"""The proof: re-running the recorded calls of REAL Claude Code sessions reproduces the recorded observations.

For every fixture (tests/fixtures/claude_code/<version>/<scenario>/, written by the real binaries), the
workspace is rebuilt at the recorded cwd from ``workspace-initial/``, every FRESH-policy call of every complete
batch is re-run in order by ``ClaudeToolExecutor``, and each fresh observation must equal the historical one:
content byte for byte and ``is_error``, call by call. The only normalisation is ``tools.normalize_volatile``
(the path of a persisted large output, which names the agent home and a random file id). The fresh
``toolUseResult`` must also equal the recorded one, and a persisted output file must hold the same bytes.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.claude_code.launch import project_dir_name
from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor, normalize_volatile
from forkpoint.core.model import CallPolicy, FreshObservation, RunContext, ToolCall
from forkpoint.testing.recordings import holding, restore_initial

FIXTURES = Path(__file__).parents[2] / "fixtures" / "claude_code"
# mcp_tools: its Bash calls read what the MCP server wrote; its proof runs the server (test_tool_mcp.py)
SESSIONS = sorted(p for p in FIXTURES.glob("[0-9]*/*/session.jsonl") if p.parent.name != "mcp_tools")


def _fresh_calls(session: Path) -> list[ToolCall]:
    trajectory = parse_session(session)
    batches = trajectory.batches[: trajectory.complete_count]
    # a sub-agent's own calls (fixture subagent) ran before the Agent call that started them, in the same workspace
    return [inner for batch in batches for call in batch.calls for inner in call.replay_order()
            if inner.policy is CallPolicy.FRESH]


def _case_id(session: Path, call_id: str) -> str:
    return f"{session.parent.parent.name}-{session.parent.name}-{call_id}"


CASES = [(session, call.call_id) for session in SESSIONS for call in _fresh_calls(session)]
IDS = [_case_id(session, call_id) for session, call_id in CASES]


@dataclass
class Replay:
    calls: dict[str, ToolCall]
    fresh: dict[str, FreshObservation]
    recorded_native: dict[str, Any]
    persisted: dict[str, bytes] = field(default_factory=dict)
    results_dir: Path | None = None
    final: dict[str, bytes] = field(default_factory=dict)  # the workspace's files after the replay
    task_files: dict[str, bytes] = field(default_factory=dict)  # the rebuilt session's task list files


_REPLAYS: dict[Path, Replay] = {}


def _recorded_tool_use_results(session: Path) -> dict[str, Any]:
    """call id -> the recorded ``toolUseResult`` (the session's and its sub-agents' transcripts; Claude writes none
    for a sub-agent's successful results: those calls are left out)."""
    found: dict[str, Any] = {}
    transcripts = sorted(session.parent.glob("*/subagents/agent-*.jsonl"))
    for raw in "\n".join(path.read_text("utf-8") for path in [session, *transcripts]).splitlines():
        if not raw:
            continue
        line = json.loads(raw)
        content = line.get("message", {}).get("content") if line.get("type") == "user" else None
        for block in content if isinstance(content, list) else []:
            if (isinstance(block, dict) and block.get("type") == "tool_result"
                    and ("toolUseResult" in line or not line.get("isSidechain"))):
                found[block["tool_use_id"]] = line.get("toolUseResult")
    return found


def replay(session: Path) -> Replay:
    """Re-run the session's fresh calls once (cached): workspace at the recorded cwd, a temporary agent home."""
    if session in _REPLAYS:
        return _REPLAYS[session]
    fixture = session.parent
    meta = json.loads((fixture / "meta.json").read_text("utf-8"))
    trajectory = parse_session(session)
    assert trajectory.version is not None and trajectory.session_id is not None
    calls = _fresh_calls(session)
    cwd = Path(meta["cwd"])
    result = Replay({call.call_id: call for call in calls}, {}, _recorded_tool_use_results(session))
    with holding(cwd), tempfile.TemporaryDirectory(prefix="forkpoint-fidelity-") as tmp:
        restore_initial(fixture)
        config_dir = Path(tmp) / "home" / ".claude"
        context = RunContext(cwd, Path(tmp) / "state", Path(tmp) / "out")
        executor = ClaudeToolExecutor(context, trajectory.version, trajectory.session_id, config_dir,
                                      recorded=trajectory.version)  # a recorded-version profile (2.1.108)
        try:
            for call in calls:
                fresh = executor.run(call)
                result.fresh[call.call_id] = fresh
                if isinstance(fresh.native, dict) and "persistedOutputPath" in fresh.native:
                    result.persisted[call.call_id] = Path(fresh.native["persistedOutputPath"]).read_bytes()
                    result.results_dir = (
                        config_dir / "projects" / project_dir_name(cwd) / trajectory.session_id / "tool-results"
                    )
                    assert Path(fresh.native["persistedOutputPath"]).parent == result.results_dir
            result.final = _files(cwd)
            result.task_files = _files(config_dir / "tasks" / trajectory.session_id)
        finally:
            executor.close()
            shutil.rmtree(cwd, ignore_errors=True)
    _REPLAYS[session] = result
    return result


def _files(root: Path) -> dict[str, bytes]:
    if not root.is_dir():
        return {}
    return {str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()}


FINAL = sorted(FIXTURES.glob("[0-9]*/*/workspace-final"))
TASKS = sorted(FIXTURES.glob("[0-9]*/*/tasks"))


@pytest.mark.parametrize("final", FINAL, ids=[f"{p.parent.parent.name}-{p.parent.name}" for p in FINAL])
def test_workspace_after_replay_equals_recorded_bytes(final: Path) -> None:
    """NotebookEdit & co: the files the replay leaves are the bytes the real binary left, file by file."""
    assert replay(final.parent / "session.jsonl").final == _files(final)


@pytest.mark.parametrize("tasks", TASKS, ids=[f"{p.parent.parent.name}-{p.parent.name}" for p in TASKS])
def test_task_list_files_equal_recorded(tasks: Path) -> None:
    """The task list the continued agent reads: Claude's own files, byte for byte (its ``.lock`` is empty)."""
    written = replay(tasks.parent / "session.jsonl").task_files
    assert written.pop(".lock") == b""
    assert written == _files(tasks)


def _without_persisted_path(native: Any) -> Any:
    if isinstance(native, dict) and "persistedOutputPath" in native:
        return {**native, "persistedOutputPath": "<persisted-output-path>"}
    return native


def test_every_verified_version_has_fresh_calls() -> None:
    versions = {session.parent.parent.name for session, _ in CASES}
    assert {"2.1.220", "2.1.332"} <= versions
    for session in SESSIONS:
        if session.parent.name != "unavailable_tools":
            assert _fresh_calls(session), f"{session.parent} has no fresh call to replay"


@pytest.mark.parametrize("version", ["2.1.220", "2.1.332"])
def test_tools_a_print_run_refuses_stay_stale_with_their_reason(version: str) -> None:
    """TodoWrite, plan mode, AskUserQuestion, an unknown Skill, a blank TaskCreate: the real binary refused them
    (``<tool_use_error>``), so nothing ran; they are reused as stale, each with a reason, never re-run."""
    trajectory = parse_session(FIXTURES / version / "unavailable_tools" / "session.jsonl")
    calls = [call for batch in trajectory.batches for call in batch.calls]
    assert [call.name for call in calls] == ["TodoWrite", "EnterPlanMode", "ExitPlanMode", "AskUserQuestion",
                                             "Skill", "TaskCreate"]
    for call in calls:
        assert call.policy is CallPolicy.STALE and call.policy_reason, call
        assert call.historical is not None and call.historical.text.startswith("<tool_use_error>")


@pytest.mark.parametrize(("session", "call_id"), CASES, ids=IDS)
def test_fresh_observation_equals_recorded(session: Path, call_id: str) -> None:
    run = replay(session)
    call, fresh = run.calls[call_id], run.fresh[call_id]
    assert call.historical is not None
    assert normalize_volatile(fresh.content) == normalize_volatile(call.historical.content)
    assert fresh.is_error == call.historical.is_error


@pytest.mark.parametrize(("session", "call_id"), CASES, ids=IDS)
def test_fresh_tool_use_result_equals_recorded(session: Path, call_id: str) -> None:
    run = replay(session)
    if call_id not in run.recorded_native:
        pytest.skip("Claude recorded no toolUseResult for this sub-agent call")
    recorded = run.recorded_native[call_id]
    assert _without_persisted_path(run.fresh[call_id].native) == _without_persisted_path(recorded)


@pytest.mark.parametrize(
    "session",
    [s for s in SESSIONS if (s.parent / "tool-results").is_dir()],
    ids=lambda s: f"{s.parent.parent.name}-{s.parent.name}",
)
def test_persisted_output_file_equals_recorded(session: Path) -> None:
    run = replay(session)
    recorded = {path.read_bytes() for path in (session.parent / "tool-results").iterdir()}
    assert run.persisted, "the large output was not persisted"
    assert set(run.persisted.values()) == recorded
    for call_id, data in run.persisted.items():
        native = run.fresh[call_id].native
        assert native["persistedOutputSize"] == len(data)
        assert f"Full output saved to: {native['persistedOutputPath']}\n" in run.fresh[call_id].content
