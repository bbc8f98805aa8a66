"""Chain, batch and policy rules of the Claude Code parser, on hand-made sessions shaped like real ones."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from forkpoint.adapters.claude_code.parse import ClaudeNative, _merge_stream_text, parse_session
from forkpoint.adapters.claude_code.session import prefix_records
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import CallPolicy
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, simple_session, text, thinking, tool_use


def _write(tmp_path: Path, builder: ClaudeSessionBuilder, name: str = "s.jsonl") -> Path:
    return builder.write(tmp_path / name)


def _refused(path: Path) -> ReplayError:
    with pytest.raises(ReplayError) as info:
        parse_session(path)
    assert info.value.kind is ErrorKind.TRAJECTORY
    return info.value


def test_sequential_batches_and_next_actions(tmp_path: Path) -> None:
    parsed = parse_session(_write(tmp_path, simple_session(3)))
    assert parsed.complete_count == 3
    assert not parsed.incomplete_tail
    assert [b.calls[0].arguments["command"] for b in parsed.batches] == ["echo 1", "echo 2", "echo 3"]
    assert parsed.batches[0].calls[0].historical is not None
    assert parsed.batches[0].calls[0].historical.content == "1\n"
    # next_actions[n] is the turn right after batch n; the last one is the final text.
    assert parsed.next_actions[0] is not None and parsed.next_actions[0].text == "step 1"
    assert parsed.next_actions[1] is not None and parsed.next_actions[1].text == "step 2"
    assert parsed.next_actions[3] is not None and parsed.next_actions[3].text == "Done."
    assert parsed.next_actions[3].tools == ()
    assert parsed.session_id == "session-1" and parsed.version == "2.1.332" and parsed.cwd == "/work"
    assert len(parsed.source_sha256) == 64


def test_parallel_calls_are_one_batch_with_results_in_completion_order(tmp_path: Path) -> None:
    builder = ClaudeSessionBuilder()
    builder.user_prompt("two things")
    builder.assistant(
        [text("both"), tool_use("t1", "Bash", {"command": "a"}), tool_use("t2", "Bash", {"command": "b"})]
    )
    builder.results({"t1": "A", "t2": "B"}, order=["t2", "t1"])  # t2 finished first
    builder.assistant([text("done")])
    parsed = parse_session(_write(tmp_path, builder))
    assert parsed.complete_count == 1
    batch = parsed.batches[0]
    assert [c.call_id for c in batch.calls] == ["t1", "t2"]  # call order, not completion order
    assert [c.historical.content for c in batch.calls if c.historical] == ["A", "B"]
    native = parsed.native
    assert isinstance(native, ClaudeNative)
    kept = prefix_records(native, 1)
    # task, 3 assistant block lines, both result lines; ends at the last written result (t1's).
    assert [r.type for r in kept] == ["user", "assistant", "assistant", "assistant", "user", "user"]
    assert kept[-1].data is not None
    assert kept[-1].data["message"]["content"][0]["tool_use_id"] == "t1"


def test_interleaved_fragments_of_one_response_merge(tmp_path: Path) -> None:
    builder = ClaudeSessionBuilder()
    builder.user_prompt("go")
    builder.assistant([thinking("plan"), tool_use("t1", "Read", {"file_path": "a"})], message_id="m1")
    builder.results({"t1": "x"})
    builder.assistant([tool_use("t2", "Read", {"file_path": "b"})], message_id="m1")
    builder.results({"t2": "y"})
    builder.assistant([text("next")])
    parsed = parse_session(_write(tmp_path, builder))
    assert parsed.complete_count == 1
    assert [c.call_id for c in parsed.batches[0].calls] == ["t1", "t2"]
    assert parsed.next_actions[0] is not None and parsed.next_actions[0].reasoning == "plan"
    assert parsed.next_actions[1] is not None and parsed.next_actions[1].text == "next"


def test_last_line_in_file_order_is_the_leaf_even_for_a_branch(tmp_path: Path) -> None:
    builder = simple_session(2)
    fork_point = builder.records[3]["uuid"]  # the first result line
    builder.leaf = fork_point
    builder.assistant([text("branch answer")])  # appended last: the branch wins
    parsed = parse_session(_write(tmp_path, builder))
    assert parsed.complete_count == 1
    assert parsed.next_actions[1] is not None and parsed.next_actions[1].text == "branch answer"


def test_last_prompt_leaf_uuid_overrides_the_file_order(tmp_path: Path) -> None:
    builder = simple_session(2)
    main_leaf = builder.leaf
    builder.leaf = builder.records[3]["uuid"]
    builder.assistant([text("abandoned branch")])
    builder.bookkeeping({"type": "last-prompt", "lastPrompt": "x", "leafUuid": main_leaf, "sessionId": "session-1"})
    parsed = parse_session(_write(tmp_path, builder))
    assert parsed.complete_count == 2
    assert parsed.next_actions[2] is not None and parsed.next_actions[2].text == "Done."


def test_last_prompt_naming_an_unknown_leaf_is_refused(tmp_path: Path) -> None:
    builder = simple_session(1)
    builder.bookkeeping({"type": "last-prompt", "leafUuid": "nope"})
    assert "leafUuid nope" in _refused(_write(tmp_path, builder)).message


def test_sidechain_lines_are_never_the_leaf(tmp_path: Path) -> None:
    builder = simple_session(2)
    builder.records.append({**builder.records[-1], "uuid": "side-1", "isSidechain": True,
                            "parentUuid": builder.records[1]["uuid"]})
    parsed = parse_session(_write(tmp_path, builder))
    assert parsed.complete_count == 2


def test_off_chain_lines_are_not_in_the_prefix(tmp_path: Path) -> None:
    builder = simple_session(2)
    main_leaf = builder.leaf
    builder.leaf = builder.records[3]["uuid"]
    dead = builder.assistant([text("dead end")])
    builder.bookkeeping({"type": "last-prompt", "leafUuid": main_leaf})
    builder.bookkeeping({"type": "queue-operation", "operation": "enqueue", "content": "x"})
    parsed = parse_session(_write(tmp_path, builder))
    native = parsed.native
    assert isinstance(native, ClaudeNative)
    kept = {r.uuid for r in prefix_records(native, 2)}
    assert dead[0] not in kept
    assert len(kept) == 1 + 2 * 3  # task + per batch (text, tool_use, result)


def test_dangling_tool_use_is_an_incomplete_tail(tmp_path: Path) -> None:
    builder = simple_session(1)
    builder.assistant([tool_use("t9", "Bash", {"command": "sleep 30"})])
    parsed = parse_session(_write(tmp_path, builder))
    assert parsed.complete_count == 1
    assert parsed.incomplete_tail
    assert parsed.batches[1].complete is False


def test_cycle_missing_parent_and_duplicate_uuid_are_refused(tmp_path: Path) -> None:
    builder = simple_session(1)
    builder.records[0]["parentUuid"] = builder.records[-1]["uuid"]
    assert "cycle" in _refused(_write(tmp_path, builder, "cycle.jsonl")).message

    builder = simple_session(1)
    builder.records[2]["parentUuid"] = "ghost"
    error = _refused(_write(tmp_path, builder, "ghost.jsonl"))
    assert "ghost" in error.message and error.line == 3

    builder = simple_session(1)
    builder.records.append(dict(builder.records[0]))
    assert "duplicate uuid" in _refused(_write(tmp_path, builder, "dup.jsonl")).message


def test_bad_lines_name_their_line_number(tmp_path: Path) -> None:
    good = simple_session(1).lines()
    path = tmp_path / "bad.jsonl"
    path.write_bytes(good[0] + b"\n{not json\n" + b"".join(line + b"\n" for line in good[1:]))
    error = _refused(path)
    assert error.line == 2 and "line 2" in error.message

    path.write_bytes(good[0] + b"\n[1, 2]\n")
    assert "line 2 is not a JSON object" in _refused(path).message

    path.write_bytes(good[0] + b"\n\n" + good[1] + b"\n")
    assert "blank line at line 2" in _refused(path).message


def test_a_torn_final_line_is_ignored_with_a_warning(tmp_path: Path) -> None:
    lines = simple_session(2).lines()
    path = tmp_path / "torn.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines) + lines[-1][:20])
    parsed = parse_session(path)
    assert parsed.complete_count == 2
    assert any("torn final line" in warning for warning in parsed.warnings)


def test_a_file_of_another_agent_is_named(tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(orjson.dumps({"timestamp": "t", "type": "session_meta", "payload": {"id": "x"}}) + b"\n")
    assert "codex" in _refused(path).message


def test_duplicate_tool_result_and_result_before_use_are_refused(tmp_path: Path) -> None:
    builder = simple_session(1)
    builder.records.append({**builder.records[3], "uuid": "again"})
    assert "duplicate tool_result" in _refused(_write(tmp_path, builder)).message


def test_call_policies(tmp_path: Path) -> None:
    builder = ClaudeSessionBuilder()
    builder.user_prompt("go")
    builder.assistant([
        tool_use("a", "Bash", {"command": "ls"}),
        tool_use("b", "TodoWrite", {"todos": []}),
        tool_use("c", "Glob", {"pattern": "*"}),
        tool_use("d", "Bash", {"command": "sleep 9", "run_in_background": True}),
        tool_use("e", "mcp__srv__tool", {}),
    ])
    builder.results(
        {"a": "x", "b": "ok", "c": "<tool_use_error>Error: No such tool available: Glob</tool_use_error>",
         "d": "started", "e": "r"},
        errors=frozenset({"c"}),
    )
    parsed = parse_session(_write(tmp_path, builder))
    policies = {call.name: call.policy for call in parsed.batches[0].calls}
    assert policies == {
        "Bash": CallPolicy.REFUSED,  # the last Bash (run_in_background) overwrote the key
        "TodoWrite": CallPolicy.STALE,
        "Glob": CallPolicy.STALE,
        "mcp__srv__tool": CallPolicy.STALE,
    }
    assert parsed.batches[0].calls[0].policy is CallPolicy.FRESH
    assert "tool_use_error" in (parsed.batches[0].calls[2].policy_reason or "")


def test_background_sub_agent_split_by_the_boundary_is_refused(tmp_path: Path) -> None:
    builder = ClaudeSessionBuilder()
    builder.user_prompt("go")
    builder.assistant([tool_use("agent", "Agent", {"description": "d", "prompt": "p", "subagent_type": "x",
                                                   "run_in_background": True})])
    builder.results({"agent": "Async agent launched. task_id: task-42"})
    builder.assistant([tool_use("b2", "Bash", {"command": "ls"})])
    builder.results({"b2": "x"})
    builder.assistant([tool_use("out", "TaskOutput", {"task_id": "task-42"})])
    builder.results({"out": "agent result"})
    builder.assistant([text("done")])
    parsed = parse_session(_write(tmp_path, builder))
    assert parsed.complete_count == 3
    assert set(parsed.boundary_refusals) == {1, 2}
    assert "Agent(agent)" in parsed.boundary_refusals[1]
    assert "collected in batch 3" in parsed.boundary_refusals[2]


def test_streaming_text_merge_rule() -> None:
    assert _merge_stream_text("", "a") == "a"
    assert _merge_stream_text("ab", "a") == "ab"
    assert _merge_stream_text("a", "ab") == "ab"
    assert _merge_stream_text("one", "two") == "one\n\ntwo"
    assert _merge_stream_text("x", "") == "x"


def test_claude_made_up_interrupted_result_is_stale_like_a_tool_use_error(tmp_path: Path) -> None:
    builder = ClaudeSessionBuilder()
    builder.user_prompt("go")
    builder.assistant([tool_use("a", "Bash", {"command": "echo waiting && sleep 30"})])
    builder.results({"a": "[Tool call interrupted: the session ended before this call's result was recorded, so "
                          "its outcome is unknown. Check whether it took effect before relying on it or running "
                          "it again.]"}, errors=frozenset({"a"}))
    builder.assistant([text("No response requested.")])
    call = parse_session(_write(tmp_path, builder)).batches[0].calls[0]
    assert call.policy is CallPolicy.STALE
    assert "interrupted" in (call.policy_reason or "")


def test_enter_plan_mode_with_another_answer_stays_stale(tmp_path: Path) -> None:
    """Interactively a person can decline plan mode: that answer is not the tool's constant text, so not re-run."""
    builder = ClaudeSessionBuilder()
    builder.user_prompt("go")
    builder.assistant([tool_use("a", "EnterPlanMode", {})])
    builder.results({"a": "The user doesn't want to proceed with this tool use."})
    builder.assistant([text("done")])
    call = parse_session(_write(tmp_path, builder)).batches[0].calls[0]
    assert call.policy is CallPolicy.STALE and "declined plan mode" in (call.policy_reason or "")


def test_notebook_edit_and_task_tools_are_re_run_malformed_task_input_stale(tmp_path: Path) -> None:
    builder = ClaudeSessionBuilder()
    builder.user_prompt("go")
    builder.assistant([tool_use("a", "NotebookEdit", {"notebook_path": "/work/n.ipynb", "new_source": "x"}),
                       tool_use("b", "TaskCreate", {"subject": "s"}),
                       tool_use("c", "TaskCreate", {"task": {"subject": "s"}}),
                       tool_use("d", "TaskUpdate", {"taskId": "1", "status": "done"})])
    builder.results({"a": "Updated cell", "b": "Task #1 created successfully: s",
                     "c": "Task #2 created successfully: s", "d": "Updated task #1 status"})
    builder.assistant([text("done")])
    notebook, plain, wrapped, bad_status = parse_session(_write(tmp_path, builder)).batches[0].calls
    assert notebook.policy is CallPolicy.FRESH and plain.policy is CallPolicy.FRESH
    assert wrapped.policy is CallPolicy.STALE and wrapped.policy_reason == (
        "TaskCreate input lacks subject: Claude Code coerces such input, forkpoint does not re-run it")
    assert bad_status.policy is CallPolicy.STALE and "'done'" in (bad_status.policy_reason or "")


def test_stream_json_stdout_is_not_a_session_file() -> None:
    stdout = Path(__file__).parents[2] / "fixtures" / "claude_code" / "2.1.332" / "single_bash" / "stdout.jsonl"
    error = _refused(stdout)
    assert "stream-json" in error.message and "not a Claude Code session file" in error.message
    assert "/.claude/projects/-tmp-forkpoint-rec-single-bash/" in error.message
