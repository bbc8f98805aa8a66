"""Codex rollout parsing rules on hand-made rollouts shaped like real ones."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import orjson
import pytest

from forkpoint.adapters.codex.parse import parse_rollout
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import CallPolicy
from forkpoint.testing.codex_rollouts import CodexRolloutBuilder, simple_rollout


def _refused(path: Path) -> ReplayError:
    with pytest.raises(ReplayError) as info:
        parse_rollout(path)
    assert info.value.kind is ErrorKind.TRAJECTORY
    return info.value


def test_sequential_batches(tmp_path: Path) -> None:
    parsed = parse_rollout(simple_rollout(3).write(tmp_path / "r.jsonl"))
    assert parsed.complete_count == 3 and not parsed.incomplete_tail
    assert parsed.session_id == "019a0000-0000-7000-8000-000000000001"
    assert parsed.version == "0.149.0" and parsed.cwd == "/work"
    assert parsed.batches[0].calls[0].arguments == {"cmd": "echo 1"}
    assert parsed.batches[2].calls[0].historical is not None
    assert parsed.next_actions[3] is not None and parsed.next_actions[3].text == "Done."


def test_parallel_calls_with_events_between_are_one_batch(tmp_path: Path) -> None:
    builder = CodexRolloutBuilder()
    builder.user("two")
    builder.item({"type": "reasoning", "summary": [{"type": "summary_text", "text": "both at once"}]})
    first = builder.call("exec_command", {"cmd": "a"})
    second = builder.call("exec_command", {"cmd": "b"})
    builder.event("item_completed", call_id=second)
    builder.event("item_completed", call_id=first)
    builder.output(first, "A")
    builder.output(second, "B")
    builder.assistant("ok")
    parsed = parse_rollout(builder.write(tmp_path / "r.jsonl"))
    assert parsed.complete_count == 1
    assert [c.call_id for c in parsed.batches[0].calls] == [first, second]
    assert parsed.next_actions[0] is not None and parsed.next_actions[0].reasoning == "both at once"


def test_missing_session_meta_or_id_is_refused(tmp_path: Path) -> None:
    builder = simple_rollout(1)
    builder.lines.pop(0)
    assert "session_meta" in _refused(builder.write(tmp_path / "a.jsonl")).message
    builder = simple_rollout(1)
    del builder.lines[0]["payload"]["id"]
    assert "never continues a rollout as a brand-new session" in _refused(builder.write(tmp_path / "b.jsonl")).message


def test_dangling_call_is_an_incomplete_tail(tmp_path: Path) -> None:
    builder = simple_rollout(1)
    builder.call("exec_command", {"cmd": "sleep 30"})
    parsed = parse_rollout(builder.write(tmp_path / "r.jsonl"))
    assert parsed.complete_count == 1 and parsed.incomplete_tail


def test_tool_policies(tmp_path: Path) -> None:
    builder = CodexRolloutBuilder()
    builder.user("go")
    for name in ("exec_command", "write_stdin", "mystery_tool"):
        builder.output(builder.call(name, {}), "x")
    builder.item({"type": "function_call", "id": "fc_bad", "name": "exec_command", "arguments": "{not json",
                  "call_id": "bad"})
    builder.output("bad", "failed to parse function arguments")
    parsed = parse_rollout(builder.write(tmp_path / "r.jsonl"))
    policies = [c.policy for batch in parsed.batches for c in batch.calls]
    assert policies == [CallPolicy.FRESH, CallPolicy.FRESH, CallPolicy.REFUSED, CallPolicy.STALE]


@pytest.mark.parametrize(("version", "policy"), [("0.171.0", CallPolicy.FRESH), ("0.149.0", CallPolicy.FRESH),
                                               ("0.40.0", CallPolicy.STALE)])
def test_view_image_is_rerun_from_the_measured_versions_on(tmp_path: Path, version: str, policy: CallPolicy) -> None:
    builder = CodexRolloutBuilder(version=version)
    builder.user("look")
    builder.output(builder.call("view_image", {"path": "a.png"}), "unable to locate image")
    call = parse_rollout(builder.write(tmp_path / "r.jsonl")).batches[0].calls[0]
    assert call.policy is policy
    # (0.40's measured form, the constant output and an image message, re-runs: test_tool_image)
    assert (call.policy_reason is not None and "before 0.149" in call.policy_reason) == (policy is CallPolicy.STALE)


def test_lines_without_type_payload_or_timestamp_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text('{"type":"session_meta","payload":{"id":"x"}}\n')
    assert "timestamp" in _refused(path).message
    path.write_text('{"uuid":"u","parentUuid":null}\n')
    assert "not a Codex rollout line" in _refused(path).message


def test_a_call_without_output_blocks_only_boundaries_at_or_after_its_batch(tmp_path: Path) -> None:
    """Codex wrote no output for a call (it answered the model with an invented ``aborted``, as for an
    ``apply_patch`` sent as a JSON function call) and the turn went on: the token_count after each response still
    separates the batches, so the next response's call is not pulled into the unanswered batch."""
    from forkpoint.core.model import Mode
    from forkpoint.run.plan import select_boundary

    builder = CodexRolloutBuilder()
    builder.user("go")
    first = builder.call("exec_command", {"cmd": "ls"})
    builder.output(first, "a.txt\n")
    builder.event("token_count", info=None)
    builder.call("apply_patch", {"input": "*** Begin Patch"})  # never answered in the rollout
    builder.event("token_count", info=None)
    third = builder.call("exec_command", {"cmd": "cat a.txt"})
    builder.output(third, "hello\n")
    builder.event("token_count", info=None)
    builder.assistant("Done.")
    parsed = parse_rollout(builder.write(tmp_path / "r.jsonl"))
    assert [[call.name for call in batch.calls] for batch in parsed.batches] == [
        ["exec_command"], ["apply_patch"], ["exec_command"]]
    assert parsed.complete_count == 1 and parsed.incomplete_tail
    assert parsed.next_actions[1] is not None
    assert parsed.next_actions[1].tools == (("apply_patch", {"input": "*** Begin Patch"}),)
    assert select_boundary(parsed, 1, Mode.PREPARE_ONLY, "p").after_step == 1
    with pytest.raises(ReplayError, match="batch 2 is incomplete"):
        select_boundary(parsed, 2, Mode.PREPARE_ONLY, "p")


def test_a_rollout_with_a_huge_answer_is_parsed_in_about_twice_its_size(tmp_path: Path) -> None:
    """The continued rollout of a 16 MB answer holds it twice (the message and task_complete's copy). Before, the
    re-parse held ~9x the file (a copy of each line, a copy without its newline, orjson's ~13x of a huge string, the
    event's payload kept); now under 3x: the file, the message's text, one line's parse at a time."""
    text = "abcde " * ((16 << 20) // 6)
    path = simple_rollout(1).write(tmp_path / "r.jsonl")
    with path.open("ab") as handle:
        for line in ({"type": "response_item", "payload": {"type": "message", "role": "assistant",
                                                           "content": [{"type": "output_text", "text": text}]}},
                     {"type": "event_msg", "payload": {"type": "task_complete", "last_agent_message": text}}):
            handle.write(orjson.dumps({"timestamp": "t", **line}) + b"\n")
    del text
    size = path.stat().st_size
    tracemalloc.start()
    try:
        parsed = parse_rollout(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * size, (peak, size)
    signature = parsed.next_actions[-1]
    assert signature is not None and len(signature.text) > 16_000_000
