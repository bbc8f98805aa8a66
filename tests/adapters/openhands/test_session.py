"""The OpenHands native files forkpoint writes: the prefix trajectory and the ReplayManager input (pure)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from forkpoint.adapters.openhands.format import TRUNCATION_NOTE, model_text, truncate_content
from forkpoint.adapters.openhands.parse import parse_events
from forkpoint.adapters.openhands.session import prefix_events, replay_input, replayed_action_count
from forkpoint.adapters.openhands.tools import check_replay_input, fresh_observations
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import FreshObservation, Mode, Plan

FIXTURES = Path(__file__).parents[2] / "fixtures" / "openhands" / "0.62.0"


def plan(scenario: str, after: int) -> Plan:
    return Plan(parse_events(FIXTURES / scenario / "trajectory.json"), after, Mode.REPLAY_AND_CONTINUE, "p")


def test_replay_input_starts_with_the_task_and_drops_system_and_recall() -> None:
    events = replay_input(plan("parallel", 2))
    assert events[0]["source"] == "user" and events[0]["action"] == "message"
    assert [e["action"] for e in events[1:]] == ["run", "read", "run"]
    assert all("observation" not in e for e in events)
    assert replayed_action_count(events) == 3


def test_prepared_prefix_ends_at_the_last_observation_of_batch_n() -> None:
    events = prefix_events(plan("parallel", 1), None)
    original = json.loads((FIXTURES / "parallel" / "trajectory.json").read_text())
    assert events == original[: len(events)]
    assert events[-1]["observation"] == "read" and events[0]["action"] == "system"


def test_rebuilt_prefix_takes_the_fresh_observation_fields() -> None:
    cut = plan("basic", 1)
    call = cut.calls[0]
    native = {"observation": "run", "content": "fresh\n", "extras": {"metadata": {"exit_code": 0}}, "success": True,
              "message": "m"}
    events = prefix_events(cut, {call.call_id: FreshObservation(call.call_id, "x", native=native)})
    last = events[-1]
    assert (last["content"], last["extras"], last["cause"]) == ("fresh\n", {"metadata": {"exit_code": 0}}, 5)
    assert last["tool_call_metadata"]["tool_call_id"] == call.call_id


def test_fresh_observations_are_matched_by_tool_call_id() -> None:
    original = json.loads((FIXTURES / "basic" / "trajectory.json").read_text())
    replayed = [e for e in original if e["id"] <= 12]  # what a replay of 4 batches saves (no finish)
    cut = plan("basic", 4)
    found = fresh_observations(replayed, [c.call_id for c in cut.calls])
    assert [found[c.call_id]["cause"] for c in cut.calls] == [5, 7, 9, 11]
    with pytest.raises(ReplayError, match="replayed the calls"):
        fresh_observations(original, [c.call_id for c in cut.calls])  # an extra (finish) action: refused
    without = [e for e in replayed if e.get("cause") != 9]
    with pytest.raises(ReplayError, match="no observation"):
        fresh_observations(without, [c.call_id for c in cut.calls])


def test_model_text_and_truncation() -> None:
    event = {"observation": "run", "content": "x", "extras": {"metadata": {"exit_code": -1, "working_dir": "/w",
                                                                            "suffix": "\n[timed out]"}}}
    assert model_text(event) == "x\n[timed out]\n[Current working directory: /w]"
    assert model_text({"observation": "error", "content": "bad"}) == "bad\n[Error occurred in processing last action]"
    long = "a" * 10 + "b" * 10
    assert truncate_content(long, 10) == "aaaaa" + TRUNCATION_NOTE + "bbbbb"
    assert model_text({"observation": "read", "content": long}, 10) == long  # reads are never cut here


def test_replay_input_drops_the_environment_events_of_a_gui_session() -> None:
    """ReplayManager skips ENVIRONMENT events (a GUI session's change_agent_state): they must not count as a
    controller step, or the replay takes one step more than it replays and calls the model."""
    parsed = parse_events(FIXTURES / "basic" / "trajectory.json")
    state = {"id": 3, "source": "environment", "message": "Agent state changed to init",
             "action": "change_agent_state", "args": {"agent_state": "init", "thought": ""}}
    native = parsed.native
    events = (*native.events[:2], state, *native.events[2:])
    gui = Plan(replace(parsed, native=replace(native, events=events)), 1, Mode.REPLAY_AND_CONTINUE, "p")
    replayed = replay_input(gui)
    assert [e["action"] for e in replayed] == ["message", "run"]
    assert replayed_action_count(replayed) == 1


def test_a_replay_input_that_would_not_replay_the_prefix_is_refused_before_running() -> None:
    events = replay_input(plan("parallel", 2))
    ids = [e["tool_call_metadata"]["tool_call_id"] for e in events[1:]]
    check_replay_input(events, ids)
    gui = [*events, {"id": 99, "source": "environment", "action": "change_agent_state", "args": {}}]
    for bad, calls in ((gui, ids), (events, ids[:-1])):
        with pytest.raises(ReplayError, match="nothing was run") as caught:
            check_replay_input(bad, calls)
        assert caught.value.before_effect and caught.value.kind.exit_code == 10
