"""Pi parsing: the real recordings (event stream and session file agree) and hand-made edge cases."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.pi import PiAdapter
from forkpoint.adapters.pi.parse import parse_pi
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import CallPolicy

FIXTURES = Path(__file__).parents[2] / "fixtures" / "pi" / "0.83.0"
SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "events.jsonl").is_file())


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _write(path: Path, objects: list[dict[str, Any]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objects) + tail)
    return path


def _refused(path: Path) -> ReplayError:
    with pytest.raises(ReplayError) as info:
        parse_pi(path)
    assert info.value.kind is ErrorKind.TRAJECTORY
    return info.value


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_events_and_session_of_one_run_parse_alike(scenario: str) -> None:
    events = parse_pi(FIXTURES / scenario / "events.jsonl")
    session = parse_pi(FIXTURES / scenario / "session.jsonl")
    assert events.native.source_format == "events" and session.native.source_format == "session"
    assert events.session_id == session.session_id and events.cwd == session.cwd == f"/tmp/forkpoint-rec-pi/{scenario}"
    assert events.native.messages == session.native.messages
    assert [[(c.call_id, c.name, c.arguments, c.historical) for c in b.calls] for b in events.batches] == [
        [(c.call_id, c.name, c.arguments, c.historical) for c in b.calls] for b in session.batches]
    assert events.next_actions == session.next_actions
    script = json.loads((FIXTURES / scenario / "script.json").read_text())
    scripted = [[b["id"] for b in turn["content"] if b["type"] == "tool_use"] for turn in script["turns"]]
    assert [[c.call_id for c in b.calls] for b in events.batches] == [ids for ids in scripted if ids]
    assert events.complete_count == len(events.batches)


def test_parallel_batch_keeps_call_order_and_next_actions() -> None:
    parsed = parse_pi(FIXTURES / "parallel" / "events.jsonl")
    assert [c.call_id for c in parsed.batches[0].calls] == ["call_par_1", "call_par_2", "call_par_3"]
    first = parsed.next_actions[0]
    assert first is not None and first.reasoning == "Read both files at once."
    assert parsed.next_actions[1] is not None and parsed.next_actions[1].tools[0][0] == "write"
    final = parsed.next_actions[2]
    assert final is not None and final.text == "c.txt holds the union." and final.tools == ()


def test_errors_are_observations_with_is_error() -> None:
    parsed = parse_pi(FIXTURES / "error_result" / "events.jsonl")
    observations = {c.call_id: c.historical for b in parsed.batches for c in b.calls}
    assert all(o is not None and o.is_error for o in observations.values())
    bash = observations["call_err_2"]
    assert bash is not None and bash.text.endswith("Command exited with code 3")


def test_tools_pi_rejected_are_fresh_calls_and_keep_the_default_set() -> None:
    """Pi answered "Tool <name> not found": a deterministic observation, re-made by replay, never a refusal."""
    for scenario, rejected in (("unknown_tool", {"glob"}), ("unknown_tools", {"Bash", "todowrite", "grep",
                                                                              "run_checks"})):
        parsed = parse_pi(FIXTURES / scenario / "events.jsonl")
        calls = [c for b in parsed.batches for c in b.calls]
        assert all(c.policy is CallPolicy.FRESH for c in calls), calls
        assert {c.name for c in calls if c.historical and c.historical.text == f"Tool {c.name} not found"} == rejected
        assert parsed.native.tools == ("read", "bash", "edit", "write")  # grep was off: Pi rejected it
        assert PiAdapter().profile_for(parsed).startswith("pi/0.83.0/")
        assert not any("enabled tools" in w for w in parsed.warnings)


def test_optional_tools_pi_ran_are_part_of_the_recorded_configuration() -> None:
    for name in ("events.jsonl", "session.jsonl"):
        parsed = parse_pi(FIXTURES / "optional_tools" / name)
        assert parsed.native.tools == ("read", "bash", "edit", "write", "grep", "find", "ls")
        assert all(c.policy is CallPolicy.FRESH for b in parsed.batches for c in b.calls)
        assert any("grep,find,ls" in w and "enabled tools" in w for w in parsed.warnings)


def _with_result(events: list[dict[str, Any]], call_id: str, name: str, text: str, *, error: bool = True,
                 batch: int = 0) -> list[dict[str, Any]]:
    """Rename one call (and its result) of the single_bash recording and give it another result text."""
    out = json.loads(json.dumps(events))
    for event in out:
        for message in [event.get("message"), *(event.get("toolResults") or []), *(event.get("messages") or [])]:
            if not isinstance(message, dict):
                continue
            for block in message.get("content") or []:
                if isinstance(block, dict) and block.get("type") == "toolCall" and block.get("id") == call_id:
                    block["name"] = name
            if message.get("toolCallId") == call_id:
                message.update(toolName=name, isError=error, content=[{"type": "text", "text": text}])
    return out


def test_a_tool_pi_ran_that_is_no_built_in_is_refused_only_at_its_boundary(tmp_path: Path) -> None:
    """An extension tool Pi ran (not a built-in, not rejected) stays refused, as unsupported_tool, and only for
    boundaries whose batches hold it."""
    events = _with_result(_events(), "call_sb_2", "todowrite", "Todos updated", error=False)
    parsed = parse_pi(_write(tmp_path / "ext.jsonl", events))
    refused = parsed.batches[1].calls[0]
    assert refused.policy is CallPolicy.REFUSED and "not one of its built-in tools" in str(refused.policy_reason)
    profile = PiAdapter().profile_for(parsed)  # the recording as a whole is not refused
    from forkpoint.core.model import Mode
    from forkpoint.run.plan import select_boundary

    assert select_boundary(parsed, 1, Mode.REPLAY_ONLY, profile).after_step == 1
    with pytest.raises(ReplayError) as info:
        select_boundary(parsed, 2, Mode.REPLAY_ONLY, profile)
    assert info.value.kind is ErrorKind.UNSUPPORTED_TOOL and info.value.kind.exit_code == 11
    assert "todowrite(call_sb_2) in batch 2" in info.value.message


def test_a_built_in_pi_rejected_is_off_and_a_changed_tool_set_is_refused(tmp_path: Path) -> None:
    rejected = _with_result(_events(), "call_sb_2", "bash", "Tool bash not found")
    parsed = parse_pi(_write(tmp_path / "nobash.jsonl", rejected))
    # bash ran in batch 1 and was rejected in batch 2: the tool set changed within the session
    assert [c.policy for b in parsed.batches for c in b.calls] == [CallPolicy.REFUSED, CallPolicy.REFUSED]
    assert "both running and rejecting" in str(parsed.batches[0].calls[0].policy_reason)
    only = _with_result(_with_result(_events(), "call_sb_1", "ls", "a\nb", error=False),
                        "call_sb_2", "bash", "Tool bash not found")
    parsed = parse_pi(_write(tmp_path / "ls.jsonl", only))
    assert parsed.native.tools == ("read", "edit", "write", "ls")
    assert [c.policy for b in parsed.batches for c in b.calls] == [CallPolicy.FRESH, CallPolicy.FRESH]


# -- event stream edge cases -------------------------------------------------------------------------------------


def _events(scenario: str = "single_bash") -> list[dict[str, Any]]:
    return _lines(FIXTURES / scenario / "events.jsonl")


def test_cut_final_turn_is_an_incomplete_tail(tmp_path: Path) -> None:
    events = _events()
    last_turn_end = max(i for i, e in enumerate(events) if e["type"] == "turn_end"
                        and e["message"]["stopReason"] == "toolUse")
    cut = events[:last_turn_end]  # the last tool turn has its assistant message_end but no turn_end
    parsed = parse_pi(_write(tmp_path / "cut.jsonl", cut))
    assert len(parsed.batches) == 2 and parsed.complete_count == 1 and parsed.incomplete_tail
    assert any("ends inside a turn" in w for w in parsed.warnings)


def test_torn_final_line_is_ignored_with_a_warning(tmp_path: Path) -> None:
    parsed = parse_pi(_write(tmp_path / "torn.jsonl", _events(), tail='{"type":"turn_e'))
    assert parsed.complete_count == 2 and any("torn final line" in w for w in parsed.warnings)


def test_bad_middle_line_and_non_object_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"type":"agent_start"}\nnot json\n')
    assert "invalid Pi JSONL line 2" in _refused(path).message
    path.write_text('{"type":"agent_start"}\n[1, 2]\n')
    assert "must contain an object" in _refused(path).message


def test_missing_results_before_the_last_turn_are_refused(tmp_path: Path) -> None:
    events = _events()
    first = next(e for e in events if e["type"] == "turn_end")
    first["toolResults"] = []
    assert "1 tool calls but 0 results" in _refused(_write(tmp_path / "r.jsonl", events)).message


def test_turn_end_shape_errors(tmp_path: Path) -> None:
    cases: list[tuple[Callable[[dict[str, Any]], object], str]] = [
        (lambda t: t.pop("message"), "has no message"),
        (lambda t: t["message"].update(role="user"), "not an assistant message"),
        (lambda t: t["message"].update(content="text"), "content must be an array"),
        (lambda t: t["message"]["content"][-1].pop("id"), "has no id"),
        (lambda t: t["message"]["content"][-1].update(arguments="ls"), "arguments must be an object"),
        (lambda t: t.pop("toolResults"), "no toolResults array"),
        (lambda t: t["toolResults"][0].update(toolName="read"), "does not match its tool name"),
        (lambda t: t["toolResults"][0].pop("toolCallId"), "without toolCallId"),
    ]
    for index, (mutate, message) in enumerate(cases):
        events = _events()
        mutate(next(e for e in events if e["type"] == "turn_end"))
        assert message in _refused(_write(tmp_path / f"case{index}.jsonl", events)).message, message


def test_duplicate_call_ids_are_refused(tmp_path: Path) -> None:
    events = _events("parallel")
    turn = next(e for e in events if e["type"] == "turn_end")
    turn["message"]["content"][2]["id"] = turn["message"]["content"][1]["id"]
    assert "duplicate tool call id" in _refused(_write(tmp_path / "dup.jsonl", events)).message


def test_no_user_message_is_refused(tmp_path: Path) -> None:
    events = [e for e in _events() if not (e["type"] == "message_end" and e["message"]["role"] == "user")]
    assert "no native user message" in _refused(_write(tmp_path / "nouser.jsonl", events)).message


def test_event_stream_without_header_gets_a_derived_session_id(tmp_path: Path) -> None:
    events = [e for e in _events() if e["type"] != "session"]
    parsed = parse_pi(_write(tmp_path / "rpc.jsonl", events))
    assert parsed.session_id and parsed.cwd is None and parsed.complete_count == 2
    assert parse_pi(tmp_path / "rpc.jsonl").session_id == parsed.session_id


# -- session file edge cases -------------------------------------------------------------------------------------


def _session(scenario: str = "single_bash") -> list[dict[str, Any]]:
    return _lines(FIXTURES / scenario / "session.jsonl")


def test_session_follows_the_active_branch(tmp_path: Path) -> None:
    entries = _session()
    first_result = next(i for i, e in enumerate(entries) if e.get("message", {}).get("role") == "toolResult")
    # an abandoned branch hanging off the first result: it is not on the path from the last entry
    stray = {"type": "message", "id": "deadbeef", "parentId": entries[first_result]["id"],
             "timestamp": entries[first_result]["timestamp"],
             "message": {"role": "user", "content": "abandoned branch"}}
    parsed = parse_pi(_write(tmp_path / "branch.jsonl", [*entries[:first_result + 1], stray,
                                                         *entries[first_result + 1:]]))
    assert parsed.complete_count == 2 and all(m.get("content") != "abandoned branch" for m in parsed.native.messages)
    assert any("off the active branch" in w for w in parsed.warnings)


def test_session_chain_errors(tmp_path: Path) -> None:
    entries = _session()
    entries[-1]["parentId"] = "nope0000"
    assert "names no entry" in _refused(_write(tmp_path / "a.jsonl", entries)).message
    entries = _session()
    entries[1]["parentId"] = entries[-1]["id"]
    assert "cycle" in _refused(_write(tmp_path / "b.jsonl", entries)).message
    entries = _session()
    entries[-1]["id"] = entries[-2]["id"]
    assert "duplicated" in _refused(_write(tmp_path / "c.jsonl", entries)).message


def _compacted(version: str = "0.83.0") -> list[dict[str, Any]]:
    """The file_tools session with a compaction (as Pi 1.x writes one) after batch 2's result."""
    entries = _lines(FIXTURES.parent / version / "file_tools" / "session.jsonl")
    results = [i for i, e in enumerate(entries) if e.get("message", {}).get("role") == "toolResult"]
    at = results[1] + 1
    compaction = {"type": "compaction", "id": "c0mpact1", "parentId": entries[at - 1]["id"], "timestamp": "x",
                  "summary": "wrote and read greeting.txt", "firstKeptEntryId": entries[results[1]]["id"],
                  "tokensBefore": 1}
    entries[at]["parentId"] = "c0mpact1"
    return [*entries[:at], compaction, *entries[at:]]


@pytest.mark.parametrize("version", ["0.83.0", "1.6.0"])
def test_session_compaction_keeps_the_numbering(version: str, tmp_path: Path) -> None:
    """A compaction replaces the earlier turns by a model-written summary: every batch keeps its number and the
    compaction is kept with where it sits and which message it keeps from (the rebuild writes it back)."""
    plain = parse_pi(FIXTURES.parent / version / "file_tools" / "session.jsonl")
    parsed = parse_pi(_write(tmp_path / "c.jsonl", _compacted(version)))
    assert [c.call_id for b in parsed.batches for c in b.calls] == [c.call_id for b in plain.batches for c in b.calls]
    assert all(c.policy is CallPolicy.FRESH for b in parsed.batches for c in b.calls)
    (compaction,) = parsed.native.compactions  # right after batch 2's result, keeping that result
    assert compaction.position == compaction.kept + 1 == parsed.native.batch_end[1] + 1
    assert parsed.native.messages[compaction.kept]["toolCallId"] == "call_ft_2"
    assert any(f"compacted the context ({compaction.where})" in w for w in parsed.warnings)
    assert parsed.next_actions == plain.next_actions


def test_event_stream_compaction_refuses_the_batches_after_it(tmp_path: Path) -> None:
    lines = _lines(FIXTURES.parent / "1.6.0" / "file_tools" / "events.jsonl")
    ends = [i for i, e in enumerate(lines) if e["type"] == "turn_end"]
    event = {"type": "compaction_end", "reason": "threshold", "result": {"summary": "s", "firstKeptEntryId": "x"},
             "aborted": False, "willRetry": False}
    parsed = parse_pi(_write(tmp_path / "e.jsonl", [*lines[:ends[0] + 1], event, *lines[ends[0] + 1:]]))
    assert [[c.policy for c in b.calls] for b in parsed.batches] == [[CallPolicy.FRESH]] + [[CallPolicy.REFUSED]] * 3


def test_session_context_edit_is_refused(tmp_path: Path) -> None:
    entries = _session()
    entries.append({"type": "context_edit", "id": "ed1t0001", "parentId": entries[-1]["id"], "timestamp": "x",
                    "targetId": entries[3]["id"], "replacement": None})
    assert "changes the model context" in _refused(_write(tmp_path / "c.jsonl", entries)).message


def test_session_with_an_unanswered_call_before_a_user_message_is_refused(tmp_path: Path) -> None:
    entries = _session()
    result = next(i for i, e in enumerate(entries) if e.get("message", {}).get("role") == "toolResult")
    entries[result]["message"] = {"role": "user", "content": "interrupted"}
    assert 'no result for tool call "call_sb_1"' in _refused(_write(tmp_path / "u.jsonl", entries)).message


def test_session_header_version_must_be_3(tmp_path: Path) -> None:
    entries = _session()
    entries[0]["version"] = 2
    assert "is not 3" in _refused(_write(tmp_path / "v2.jsonl", entries)).message


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_pi_1x_recordings_are_read_as_1_6_0(scenario: str) -> None:
    """Pi 1.x writes a ``system`` message first (prompt sections, tool loadout): its family, read as 1.6.0, with
    the enabled tools taken from the loadout it recorded; the event stream and session file agree."""
    events = parse_pi(FIXTURES.parent / "1.6.0" / scenario / "events.jsonl")
    session = parse_pi(FIXTURES.parent / "1.6.0" / scenario / "session.jsonl")
    assert events.native.messages[0]["role"] == session.native.messages[0]["role"] == "system"
    assert [[c.call_id for c in b.calls] for b in events.batches] == [[c.call_id for c in b.calls]
                                                                       for b in session.batches]
    for parsed in (events, session):
        facts = PiAdapter().version_facts(parsed)
        assert (facts.status, facts.format_family, facts.tool_version) == ("verified", "pi/session-v3-system-jsonl",
                                                                         "1.6.0")
        assert parsed.native.tools_recorded
        wanted = ("read", "bash", "edit", "write", "grep", "find", "ls") if scenario == "optional_tools" else (
            "read", "bash", "edit", "write")
        assert parsed.native.tools == wanted
    old = parse_pi(FIXTURES / scenario / "session.jsonl")
    assert PiAdapter().version_facts(old).tool_version == "0.83.0" and not old.native.tools_recorded


@pytest.mark.parametrize("name", ["session.jsonl", "events.jsonl"])
def test_a_real_pi_1_6_0_compaction(name: str) -> None:
    """Recorded by the real 1.6.0 (two runs, a 150-token window): compactions after batch 2 and after batch 3. The
    batches keep their numbers; in the event stream (no compaction entries) batch 3 is refused naming why."""
    parsed = parse_pi(FIXTURES.parent / "1.6.0" / "compaction" / name)
    assert [[c.call_id for c in b.calls] for b in parsed.batches] == [["call_cmp_1"], ["call_cmp_2"], ["call_cmp_3"]]
    refused = [CallPolicy.FRESH, CallPolicy.FRESH, CallPolicy.FRESH if name == "session.jsonl" else CallPolicy.REFUSED]
    assert [c.policy for b in parsed.batches for c in b.calls] == refused
    assert len(parsed.native.compactions) == 2
    if name == "events.jsonl":
        assert "event stream does not hold" in str(parsed.batches[2].calls[0].policy_reason)
