"""Prepare-only on REAL Claude Code sessions (recorded by the real binaries; see tests/fixtures/claude_code)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request

FIXTURES = Path(__file__).parents[2] / "fixtures" / "claude_code"
SESSIONS = sorted(p for p in FIXTURES.glob("[0-9]*/*/session.jsonl"))

# scenario -> (complete batches, incomplete tail, tool names per batch)
EXPECTED: dict[str, tuple[int, bool, list[list[str]]]] = {
    "single_bash": (2, False, [["Bash"], ["Read"]]),
    "parallel": (1, False, [["Bash", "Bash"]]),
    "file_tools": (4, False, [["Write"], ["Read"], ["Edit"], ["Read"]]),
    "no_context_note": (3, False, [["Write"], ["Edit"], ["Write"]]),
    "error_result": (2, False, [["Bash"], ["Read"]]),
    "stale_tools": (3, False, [["Glob"], ["Grep"], ["Bash"]]),
    "dangling": (1, True, [["Bash"]]),
    "cd_persist": (2, False, [["Bash"], ["Bash"]]),
    "large_output": (1, False, [["Bash"]]),
    "read_outside": (3, False, [["Read"], ["Read"], ["Read"]]),
    "read_media": (4, False, [["Read"], ["Read"], ["Read"], ["Read"]]),
    "cd_continue": (3, False, [["Bash"], ["Bash"], ["Bash"]]),
    "tasks": (19, False, [["TaskList"], ["TaskCreate"], ["TaskCreate"], ["TaskCreate"], ["TaskUpdate"], ["TaskUpdate"],
                          ["TaskUpdate"], ["TaskList"], ["TaskGet"], ["TaskGet"], ["TaskUpdate"], ["TaskUpdate"],
                          ["TaskUpdate"], ["TaskUpdate"], ["TaskGet"], ["TaskUpdate"], ["TaskGet"], ["TaskCreate"],
                          ["TaskList"]]),
    "unavailable_tools": (6, False, [["TodoWrite"], ["EnterPlanMode"], ["ExitPlanMode"], ["AskUserQuestion"],
                                     ["Skill"], ["TaskCreate"]]),
    "interactive_tools": (4, False, [["EnterPlanMode"], ["AskUserQuestion"], ["ExitPlanMode"], ["Bash"]]),
    "notebook_edit": (14, False, [["Read"]] + [["NotebookEdit"]] * 9 + [["Read"], ["NotebookEdit"], ["Read"],
                                                                        ["NotebookEdit"]]),
    "subagent": (3, False, [["Bash"], ["Agent"], ["Bash"]]),
    "mcp_tools": (7, False, [["Bash"], ["mcp__tiny__echo"], ["mcp__tiny__plain"], ["mcp__tiny__two"],
                             ["mcp__tiny__count"], ["Bash"], ["mcp__tiny__fail"]]),
    # written through the Claude Agent SDK (scripts/record_claude_agent_sdk_fixtures.py)
    "sdk_query": (2, False, [["Bash"], ["Read"]]),
    "sdk_resume": (2, False, [["Bash"], ["Bash"]]),  # two query() calls, the second resume=ID: one file
    "sdk_fork": (2, False, [["Bash"], ["Bash"]]),  # fork_session: the first batch copied from the original
    "sdk_subagents": (2, False, [["Agent"], ["Bash"]]),
    # the old lines (fixtures 2.0.27/old_line, 1.0.128/old_line): their tool profile, TodoWrite re-run
    "old_line": (11, False, [["TodoWrite"], ["Read", "Read"], ["Edit"], ["Write"], ["Write"], ["TodoWrite"], ["Edit"],
                             ["Read", "Read", "Read"], ["TodoWrite"], ["TodoWrite"], ["Bash", "Bash"]]),
}


def _id(path: Path) -> str:
    return f"{path.parent.parent.name}-{path.parent.name}"


def test_both_verified_versions_have_fixtures() -> None:
    versions = {path.parent.parent.name for path in SESSIONS}
    assert {"2.1.220", "2.1.332"} <= versions, versions


@pytest.mark.parametrize("session", SESSIONS, ids=_id)
def test_real_session_batches(session: Path) -> None:
    parsed = parse_session(session)
    version = session.parent.parent.name
    assert parsed.version == version
    complete, incomplete, names = EXPECTED[session.parent.name]
    assert parsed.complete_count == complete
    assert parsed.incomplete_tail is incomplete
    assert [[call.name for call in batch.calls] for batch in parsed.batches[:complete]] == names
    for batch in parsed.batches[:complete]:
        for call in batch.calls:
            assert call.historical is not None


@pytest.mark.parametrize("session", SESSIONS, ids=_id)
def test_prepare_only_at_every_boundary(session: Path, tmp_path: Path) -> None:
    source = session.read_bytes()
    source_lines = source.split(b"\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    parsed = parse_session(session)
    for after in range(1, parsed.complete_count + 1):
        if after in parsed.boundary_refusals:  # read_media: Claude's meta message after the results
            continue
        request = build_request(
            {"agent": "claude-code", "trajectory": str(session), "after_step": after, "prepare_only": True,
             "workspace": str(workspace), "state_dir": str(tmp_path / "state"),
             "output_dir": str(tmp_path / "out"), "run_id": f"r{after}"},
            source="test",
        )
        result = execute(request)
        assert result.failure is None, result.failure
        assert result.phase == "prepared" and result.replayed_tool_calls == 0
        assert result.metadata["source_sha256"] == parsed.source_sha256
        prefix = tmp_path / "out" / f"r{after}" / "native" / "prefix" / f"{parsed.session_id}.jsonl"
        lines = prefix.read_bytes().splitlines()
        # Byte-identical source lines, in source order, only conversation records.
        positions = [source_lines.index(line) for line in lines]
        assert positions == sorted(positions)
        records = [orjson.loads(line) for line in lines]
        assert all("uuid" in record for record in records)
        assert {record["type"] for record in records} <= {"user", "assistant", "attachment", "system"}
        # A valid parent chain: every parent is an earlier line of the prefix.
        seen: set[str] = set()
        for index, record in enumerate(records):
            parent = record.get("parentUuid")
            assert parent is None if index == 0 else parent in seen
            seen.add(record["uuid"])
        # It ends with batch N's results and contains each selected call's result exactly once.
        wanted = {call.call_id for call in parsed.batches[after - 1].calls}
        results = [
            block["tool_use_id"]
            for record in records if record["type"] == "user" and isinstance(record["message"]["content"], list)
            for block in record["message"]["content"] if block.get("type") == "tool_result"
        ]
        assert len(results) == len(set(results)) == sum(len(b.calls) for b in parsed.batches[:after])
        last = records[-1]["message"]["content"][0]
        assert last["type"] == "tool_result" and last["tool_use_id"] in wanted
    assert sorted(p.name for p in workspace.iterdir()) == []
    assert session.read_bytes() == source
