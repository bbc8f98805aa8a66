"""Writing the Pi v3 session cut after batch N (historical for prepare-only, fresh for the rebuild)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint.adapters.pi import PiAdapter
from forkpoint.adapters.pi.parse import parse_pi
from forkpoint.adapters.pi.session import fresh_result
from forkpoint.core.model import FreshObservation, Mode, Plan

FIXTURES = Path(__file__).parents[2] / "fixtures" / "pi" / "0.83.0"
SCENARIOS = ("single_bash", "parallel", "file_tools", "error_result")


def _plan(scenario: str, name: str, after: int) -> Plan:
    parsed = parse_pi(FIXTURES / scenario / name)
    return Plan(parsed, after, Mode.PREPARE_ONLY, PiAdapter().profile_for(parsed))


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("name", ["events.jsonl", "session.jsonl"])
def test_prepared_prefix_is_the_recorded_session_cut_after_batch_n(scenario: str, name: str, tmp_path: Path) -> None:
    recorded = [json.loads(line) for line in (FIXTURES / scenario / "session.jsonl").read_text().splitlines()]
    for after in range(1, parse_pi(FIXTURES / scenario / name).complete_count + 1):
        plan = _plan(scenario, name, after)
        prefix = PiAdapter().write_prepared_prefix(plan, tmp_path / name / str(after))
        assert prefix.path.name.endswith(f"_{plan.trajectory.session_id}.jsonl")
        lines = [json.loads(line) for line in prefix.path.read_text().splitlines()]
        assert lines[0] == recorded[0]  # the same header: id, timestamp, cwd
        ids = [line["id"] for line in lines[1:]]
        assert [line["parentId"] for line in lines[1:]] == [None, *ids[:-1]] and len(set(ids)) == len(ids)
        messages = [line["message"] for line in lines if line["type"] == "message"]
        recorded_messages = [line["message"] for line in recorded if line["type"] == "message"]
        assert messages == recorded_messages[: len(messages)]
        assert messages[-1]["role"] == "toolResult"
        assert {m["toolCallId"] for m in messages if m["role"] == "toolResult"} == {c.call_id for c in plan.calls}
        reparsed = parse_pi(prefix.path)
        assert reparsed.complete_count == after and reparsed.session_id == plan.trajectory.session_id
        if name == "session.jsonl":  # entry ids and settings entries are kept as recorded
            assert [line["type"] for line in lines[1:3]] == ["model_change", "thinking_level_change"]
            assert ids == [line["id"] for line in recorded[1: len(lines)]]
            # byte for byte the recorded file cut after batch N (what Pi itself resumes verbatim)
            raw = (FIXTURES / scenario / "session.jsonl").read_bytes().splitlines(keepends=True)
            assert prefix.path.read_bytes() == b"".join(raw[: len(lines)])


def test_rebuilt_prefix_carries_the_fresh_results(tmp_path: Path) -> None:
    plan = _plan("parallel", "events.jsonl", 1)
    fresh = {c.call_id: FreshObservation(c.call_id, [{"type": "text", "text": f"fresh {c.call_id}"}],
                                         is_error=c.call_id == "call_par_3", native={"details": {"k": 1}})
             for c in plan.calls}
    prefix = PiAdapter().write_rebuilt_prefix(plan, fresh, tmp_path)
    results = [json.loads(line)["message"] for line in prefix.path.read_text().splitlines()[1:]
               if json.loads(line)["message"]["role"] == "toolResult"]
    assert [r["content"][0]["text"] for r in results] == ["fresh call_par_1", "fresh call_par_2", "fresh call_par_3"]
    assert [r["isError"] for r in results] == [False, False, True] and all(r["details"] == {"k": 1} for r in results)
    assert list(results[0]) == ["role", "toolCallId", "toolName", "content", "details", "isError", "timestamp"]


def test_fresh_result_without_details_omits_them() -> None:
    recorded = {"role": "toolResult", "toolCallId": "c", "toolName": "read", "content": [], "isError": False}
    result = fresh_result(recorded, FreshObservation("c", [{"type": "text", "text": "x"}], native={"details": None}))
    assert "details" not in result and "timestamp" not in result and result["content"][0]["text"] == "x"
