"""The OpenHands SDK native files forkpoint writes: the prefix bundle and the conversation folder the SDK resumes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from forkpoint.adapters.openhands_sdk.format import model_text
from forkpoint.adapters.openhands_sdk.parse import parse_conversation
from forkpoint.adapters.openhands_sdk.session import bundle, materialise, prefix_events, task_list
from forkpoint.adapters.openhands_sdk.tools import fresh_events
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import FreshObservation, Mode, Plan
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request

FIXTURES = Path(__file__).parents[2] / "fixtures" / "openhands-sdk" / "1.58.2"


def plan(scenario: str, after: int) -> Plan:
    trajectory = parse_conversation(FIXTURES / scenario / "conversation" / "base_state.json")
    return Plan(trajectory, after, Mode.REPLAY_AND_CONTINUE, "p")


def test_the_prepared_prefix_ends_at_the_last_observation_of_batch_n() -> None:
    cut = plan("parallel", 3)
    events = prefix_events(cut, None)
    assert events == list(cut.trajectory.native.events[:len(events)])
    assert events[-1]["kind"] == "ObservationEvent" and events[-1]["tool_name"] == "file_editor"
    assert len(events) == 12  # system, task, (A A O O), (A O), (A A O O)


def test_the_rebuilt_prefix_takes_the_fresh_observation_and_keeps_the_tree() -> None:
    cut = plan("basic", 1)
    recorded = cut.trajectory.native.events[3]
    fresh_event = {**recorded, "id": "ffffffff-0000", "parent_id": None, "timestamp": "now",
                   "observation": {**recorded["observation"], "content": [{"type": "text", "text": "fresh"}]}}
    fresh = {cut.calls[0].call_id: FreshObservation(cut.calls[0].call_id, model_text(fresh_event),
                                                    native=fresh_event)}
    document = bundle(cut, fresh)
    rebuilt = document["events"][-1]
    assert (rebuilt["id"], rebuilt["parent_id"], rebuilt["timestamp"]) == (
        recorded["id"], recorded["parent_id"], recorded["timestamp"])
    assert rebuilt["observation"]["content"][0]["text"] == "fresh"
    assert document["base_state"]["execution_status"] == "idle"
    assert document["base_state"]["leaf_event_id"] == recorded["id"]


def test_a_fresh_observation_of_another_call_is_refused() -> None:
    cut = plan("basic", 1)
    recorded = cut.trajectory.native.events[3]
    other = {**recorded, "tool_call_id": "call_other"}
    with pytest.raises(ReplayError, match="answers another call"):
        bundle(cut, {cut.calls[0].call_id: FreshObservation(cut.calls[0].call_id, "", native=other)})


def test_materialise_writes_the_sdk_layout_and_the_task_list(tmp_path: Path) -> None:
    document = bundle(plan("parallel", 2), None)
    folder = materialise(document, tmp_path)
    assert folder == tmp_path / document["base_state"]["id"].replace("-", "")
    names = sorted(p.name for p in (folder / "events").iterdir())
    assert names == [f"event-{i:05d}-{e['id']}.json" for i, e in enumerate(document["events"])]
    state = json.loads((folder / "base_state.json").read_text())
    assert state["persistence_dir"] == str(folder)  # never the recorded (another machine's) folder
    assert json.loads((folder / "TASKS.json").read_text()) == task_list(document["events"])
    assert [t["title"] for t in json.loads((folder / "TASKS.json").read_text())] == ["count lines", "write summary"]


def test_materialise_refuses_path_shaped_ids_and_planted_links(tmp_path: Path) -> None:
    document = bundle(plan("basic", 1), None)
    hostile = {**document, "events": [*document["events"][:-1], {**document["events"][-1], "id": "../../../x"}]}
    root = tmp_path / "root"
    root.mkdir()
    with pytest.raises(ReplayError, match="no id of the SDK's shape"):
        materialise(hostile, root)
    assert not (tmp_path / "x").exists()
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, root / document["base_state"]["id"].replace("-", ""))  # a planted link at the folder
    with pytest.raises(Exception, match="symbolic link"):
        materialise(document, root)
    assert list(outside.iterdir()) == []


def test_fresh_events_are_checked_against_the_plan() -> None:
    produced = [{"event": {"tool_call_id": "a", "kind": "ObservationEvent"}}]
    assert fresh_events(produced, ["a"]) == {"a": produced[0]["event"]}
    with pytest.raises(ReplayError, match="no observation"):
        fresh_events(produced, ["a", "b"])
    with pytest.raises(ReplayError, match="unknown call"):
        fresh_events([{"event": {"tool_call_id": "z"}}], ["a"])
    with pytest.raises(ReplayError, match="two observations"):
        fresh_events(produced * 2, ["a"])


def test_prepare_only_writes_the_historical_prefix_without_the_sdk(tmp_path: Path) -> None:
    """No runtime, no workspace writes: the prefix bundle is the recorded conversation cut at the boundary."""
    request = build_request({"agent": "openhands-sdk", "after_step": 2, "prepare_only": True,
                             "trajectory": str(FIXTURES / "basic" / "conversation" / "base_state.json"),
                             "workspace": str(tmp_path / "ws"), "state_dir": str(tmp_path / "state"),
                             "output_dir": str(tmp_path / "out"), "run_id": "prepared"}, source="test")
    result = execute(request)
    assert result.failure is None, result.failure
    prefix = json.loads(next((tmp_path / "out" / "prepared" / "native" / "prefix").glob("*.json")).read_text())
    assert prefix["events"] == prefix_events(plan("basic", 2), None)
    assert parse_conversation(next((tmp_path / "out" / "prepared" / "native" / "prefix").glob("*.json"))) \
        .complete_count == 2


def test_hostile_tool_call_ids_reach_no_path(tmp_path: Path) -> None:
    """Tool call ids never become a path: a bundle whose calls are named ``../../../../escaped-N`` prepares inside
    the output dir (only event ids, checked, and the conversation UUID name files)."""
    text = (FIXTURES / "basic" / "conversation" / "base_state.json").read_text()
    trajectory = parse_conversation(FIXTURES / "basic" / "conversation" / "base_state.json")
    document = json.dumps({"schema": "forkpoint.openhands-sdk-conversation/v1",
                           "base_state": json.loads(text), "events": list(trajectory.native.events)})
    for index, call_id in enumerate(sorted({c.call_id for b in trajectory.batches for c in b.calls})):
        document = document.replace(call_id, f"../../../../escaped-{index}")
    source = tmp_path / "in" / "-rf.json"
    source.parent.mkdir()
    source.write_text(document)
    before = {p for p in tmp_path.rglob("*")}
    request = build_request({"agent": "openhands-sdk", "after_step": 2, "prepare_only": True,
                             "trajectory": str(source), "workspace": str(tmp_path / "ws"),
                             "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
                             "run_id": "hostile"}, source="test")
    result = execute(request)
    assert result.failure is None, result.failure
    new = {p for p in set(tmp_path.rglob("*")) - before if p.relative_to(tmp_path).parts[0] not in ("out", "state")}
    assert new == set(), new
    (written,) = (tmp_path / "out" / "hostile" / "native" / "prefix").iterdir()
    assert written.name == f"{trajectory.session_id}.json"


def test_a_reused_observation_keeps_the_recorded_event() -> None:
    """A stale call the user let through (--allow-stale-observations) or one reused by design has no fresh event:
    the recorded one stays, byte for byte."""
    cut = plan("basic", 1)
    call = cut.calls[0]
    assert call.historical is not None
    stale = {call.call_id: FreshObservation(call.call_id, call.historical.text, stale_reused=True)}
    assert bundle(cut, stale)["events"] == list(cut.trajectory.native.events[:4])
    with pytest.raises(ReplayError, match="no fresh OpenHands SDK observation"):
        bundle(cut, {call.call_id: FreshObservation(call.call_id, call.historical.text)})
