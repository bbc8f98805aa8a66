"""Fixture fidelity with the workspace ELSEWHERE: fresh == recorded through --sandbox bwrap and --path-map.

Same proof as test_fixture_fidelity (every FRESH call of every recorded fixture, content byte for byte after
``normalize_volatile``, is_error, toolUseResult, persisted large outputs), but the workspace lives in a temporary
directory, not at the recorded cwd (/tmp/forkpoint-rec/<scenario>):

- bwrap: the workspace is mounted at the recorded cwd, so recorded absolute paths resolve unchanged;
- path-map (local): ``RECORDED=WORKSPACE``; every rewrite of a recorded path in an input is logged, and outputs
  naming the workspace are mapped back (documented in docs/sandboxes.md; all fixtures round-trip).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.claude_code.launch import project_dir_name
from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor, normalize_volatile
from forkpoint.core.model import CallPolicy, RunContext
from forkpoint.sandbox import open_sandbox

FIXTURES = Path(__file__).parents[2] / "fixtures" / "claude_code"
# unavailable_tools: every call was refused by Claude before running (stale), nothing to re-run
# mcp_tools: its Bash calls read what the MCP server wrote; its proof runs the server (test_tool_mcp.py)
SESSIONS = sorted(p for p in FIXTURES.glob("[0-9]*/*/session.jsonl") if p.parent.name not in ("unavailable_tools",
                                                                                           "mcp_tools"))
MODES = ["bwrap", "path_map"]


def _recorded_tool_use_results(session: Path) -> dict[str, Any]:
    """As test_fixture_fidelity's: the session's and its sub-agents' (none recorded for a sub-agent's success)."""
    found: dict[str, Any] = {}
    transcripts = sorted(session.parent.glob("*/subagents/agent-*.jsonl"))
    for raw in "\n".join(path.read_text("utf-8") for path in [session, *transcripts]).splitlines():
        if not raw:
            continue
        line = json.loads(raw)
        if line.get("isSidechain") and "toolUseResult" not in line:
            continue
        content = line.get("message", {}).get("content") if line.get("type") == "user" else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                found[block["tool_use_id"]] = line.get("toolUseResult")
    return found


def _masked(native: Any) -> Any:
    if isinstance(native, dict) and "persistedOutputPath" in native:
        return {**native, "persistedOutputPath": "<persisted-output-path>"}
    return native


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("session", SESSIONS, ids=lambda s: f"{s.parent.parent.name}-{s.parent.name}")
def test_fresh_equals_recorded_with_the_workspace_elsewhere(session: Path, mode: str, tmp_path: Path) -> None:
    if mode == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (.ci/run installs it)")
    recorded_cwd = json.loads((session.parent / "meta.json").read_text("utf-8"))["cwd"]
    trajectory = parse_session(session)
    assert trajectory.cwd == recorded_cwd and trajectory.version and trajectory.session_id
    workspace = tmp_path / "somewhere" / "else" / "ws"
    shutil.copytree(session.parent / "workspace-initial", workspace)
    path_map = [f"{recorded_cwd}={workspace}"] if mode == "path_map" else []
    sandbox = open_sandbox("local" if mode == "path_map" else "bwrap", workspace, recorded_cwd, path_map)
    config_dir = tmp_path / "state" / "home" / ".claude"
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out", sandbox=sandbox)
    executor = ClaudeToolExecutor(context, trajectory.version, trajectory.session_id, config_dir,
                                  recorded=trajectory.version)  # a recorded-version profile (2.1.108)
    recorded_native = _recorded_tool_use_results(session)
    calls = [inner for batch in trajectory.batches[: trajectory.complete_count] for call in batch.calls
             for inner in call.replay_order() if inner.policy is CallPolicy.FRESH]
    assert calls
    persisted: list[bytes] = []
    try:
        for call in calls:
            fresh = executor.run(call)
            assert call.historical is not None
            assert normalize_volatile(fresh.content) == normalize_volatile(call.historical.content), call.call_id
            assert fresh.is_error == call.historical.is_error, call.call_id
            if call.call_id in recorded_native:
                assert _masked(fresh.native) == _masked(recorded_native[call.call_id]), call.call_id
            if isinstance(fresh.native, dict) and "persistedOutputPath" in fresh.native:
                path = Path(fresh.native["persistedOutputPath"])
                # Claude keeps it under the project folder of the cwd it sees.
                assert path.parent.parent.parent.name == project_dir_name(Path(sandbox.cwd))
                persisted.append(path.read_bytes())
    finally:
        executor.close()
    if (session.parent / "tool-results").is_dir():
        assert set(persisted) == {path.read_bytes() for path in (session.parent / "tool-results").iterdir()}
    # Every call whose input names the recorded cwd was rewritten (path-map), and only then; bwrap rewrites nothing.
    naming = {call.call_id for call in calls if recorded_cwd in json.dumps(call.arguments)}
    assert {row["call_id"] for row in sandbox.path_rewrites} == (naming if mode == "path_map" else set())
    assert all(row["count"] >= 1 for row in sandbox.path_rewrites)
