"""TodoWrite re-run with 2.0.x's semantics (measured on the real 2.0.27 binary, fixture 2.0.27/old_line): the
constant text, ``oldTodos`` carried across calls, a completed list cleared, one list per context."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.claude_code.policy import classify
from forkpoint.adapters.claude_code.tool_todos import TODO_TEXT
from forkpoint.core.model import CallPolicy, Observation, RunContext, ToolCall

WILD = Path("/work/shared/wild-dev/claude-code")


def _todo(content: str, status: str) -> dict[str, str]:
    return {"content": content, "status": status, "activeForm": content + "ing"}


def test_todowrite_is_rerun_where_the_binary_ran_it() -> None:
    todos = {"todos": [_todo("a", "pending")]}
    assert classify("TodoWrite", todos, Observation(TODO_TEXT), "2.0.27") == (CallPolicy.FRESH, None)
    refused = Observation("<tool_use_error>Error: No such tool available: TodoWrite</tool_use_error>", True)
    policy, reason = classify("TodoWrite", todos, refused, "2.1.220")
    assert policy is CallPolicy.STALE and "tool_use_error" in (reason or "")
    policy, reason = classify("TodoWrite", {"todos": [{"content": "a", "status": "later"}]}, Observation(TODO_TEXT))
    assert policy is CallPolicy.STALE and "status" in (reason or "")


def test_old_todos_follow_the_run_and_a_completed_list_is_cleared(make: Any) -> None:
    run = make("2.0.27")
    first = [_todo("a", "in_progress"), _todo("b", "pending")]
    second = [_todo("a", "completed"), _todo("b", "in_progress")]
    done = [_todo("a", "completed"), _todo("b", "completed")]
    results = [run("TodoWrite", todos=todos) for todos in (first, second, done, [_todo("c", "pending")])]
    assert {r.content for r in results} == {TODO_TEXT} and not any(r.is_error for r in results)
    assert [r.native["oldTodos"] for r in results] == [[], first, second, []]
    assert [r.native["newTodos"] for r in results] == [first, second, done, [_todo("c", "pending")]]


def test_a_subagent_keeps_its_own_list(tmp_path: Path, workspace: Path, session_id: str) -> None:
    from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor

    executor = ClaudeToolExecutor(RunContext(workspace, tmp_path / "state", tmp_path / "out"), "2.1.220", session_id,
                                  tmp_path / "home" / ".claude", recorded="2.0.27")
    try:
        main = [_todo("main", "pending")]
        executor.run(ToolCall("t1", "TodoWrite", {"todos": main}, None))
        inner = executor.run(ToolCall("t2", "TodoWrite", {"todos": [_todo("sub", "pending")]}, None, subagent="x"))
        again = executor.run(ToolCall("t3", "TodoWrite", {"todos": main}, None))
        assert inner.native["oldTodos"] == [] and again.native["oldTodos"] == main
    finally:
        executor.close()


@pytest.mark.parametrize("name", ["agentcmd-2.0.14.jsonl", "agentcmd-2.0.26.jsonl"])
def test_public_recordings_todowrite_reruns_exact(name: str, tmp_path: Path, workspace: Path,
                                                  session_id: str) -> None:
    """Real-model sessions from public repositories (read in place, never copied): every TodoWrite re-runs exact."""
    from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor

    path = WILD / name
    if not path.is_file():
        pytest.skip(f"{path} is not on this machine")
    lines = [json.loads(raw) for raw in path.read_text("utf-8").splitlines() if raw.strip()]
    uses: dict[str, Any] = {}
    executor = ClaudeToolExecutor(RunContext(workspace, tmp_path / "state", tmp_path / "out"), "2.1.220", session_id,
                                  tmp_path / "home" / ".claude", recorded=lines[-1].get("version"))
    compared = 0
    try:
        for line in lines:
            content = line.get("message", {}).get("content")
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_use" and block.get("name") == "TodoWrite":
                    uses[block["id"]] = block
                elif block.get("type") == "tool_result" and block.get("tool_use_id") in uses:
                    use = uses[block["tool_use_id"]]
                    historical = Observation(block["content"], bool(block.get("is_error")))
                    assert classify("TodoWrite", use["input"], historical)[0] is CallPolicy.FRESH
                    fresh = executor.run(ToolCall(use["id"], "TodoWrite", use["input"], historical))
                    assert (fresh.content, fresh.is_error, fresh.native) == (
                        block["content"], False, line["toolUseResult"])
                    compared += 1
    finally:
        executor.close()
    assert compared == 2


def test_a_2_0_recording_names_its_tool_profile() -> None:
    """The result names the 2.0.x profile the calls re-ran with, not only the verified version it is read as."""
    from forkpoint.adapters import get_adapter

    adapter = get_adapter("claude-code")
    session = Path(__file__).parents[2] / "fixtures" / "claude_code" / "2.0.27" / "old_line" / "session.jsonl"
    facts = adapter.version_facts(adapter.parse(session))
    assert facts.status == "unverified" and facts.tool_version == "2.1.220"
    assert "claude-code 2.0.x (measured on 2.0.27) tool profile" in facts.reasons[0]
    assert "2.1.220's semantics" not in " ".join(facts.reasons)


def test_a_1_0_recording_names_its_tool_profile() -> None:
    """A 1.0.x recording (the real 1.0.128) re-runs with 2.0.27's tools and the older reminder, and says so."""
    from forkpoint.adapters import get_adapter
    from forkpoint.adapters.claude_code.tool_profile import V2_0_EARLY

    adapter = get_adapter("claude-code")
    session = Path(__file__).parents[2] / "fixtures" / "claude_code" / "1.0.128" / "old_line" / "session.jsonl"
    facts = adapter.version_facts(adapter.parse(session))
    assert facts.status == "unverified" and facts.tool_profile == V2_0_EARLY.label
    assert f"{V2_0_EARLY.label} tool profile" in facts.reasons[0]
    assert "2.1.220's semantics" not in " ".join(facts.reasons)


def test_public_2_0_reads_reproduce_from_their_recorded_file_content() -> None:
    """The public 2.0.14-2.0.29 Reads (no workspace: the text is rebuilt from the recorded ``toolUseResult.file``):
    2.0.26+ carry 2.0.27's reminder, 2.0.14 the older one (V2_0_EARLY)."""
    from forkpoint.adapters.claude_code.tool_profile import cat_n, v2_0_profile

    paths = sorted(WILD.glob("agentcmd-2.0.*.jsonl"))
    if not paths:
        pytest.skip(f"{WILD} is not on this machine")
    compared = 0
    for path in paths:
        lines = [json.loads(raw) for raw in path.read_text("utf-8").splitlines() if raw.strip()]
        profile = v2_0_profile(lines[-1]["version"])
        for line in lines:
            result = line.get("toolUseResult")
            content = line.get("message", {}).get("content")
            if not isinstance(result, dict) or result.get("type") != "text" or not isinstance(content, list):
                continue
            file = result["file"]
            assert content[0]["content"] == cat_n(file["content"], file["startLine"]) + profile.read_reminder
            compared += 1
    assert compared == 20
