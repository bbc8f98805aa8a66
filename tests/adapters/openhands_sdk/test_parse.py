"""Reading a persisted OpenHands SDK conversation: the real 1.58.2 fixtures and hostile folders (ids, file names,
links, special files, huge events)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from forkpoint.adapters.detect import guess_agent
from forkpoint.adapters.openhands_sdk.parse import parse_conversation
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import CallPolicy

FIXTURES = Path(__file__).parents[2] / "fixtures" / "openhands-sdk" / "1.58.2"


def conversation(scenario: str, tmp_path: Path) -> Path:
    """A writable copy of a fixture's conversation folder; its base_state.json."""
    target = tmp_path / scenario
    shutil.copytree(FIXTURES / scenario / "conversation", target)
    return target / "base_state.json"


def last_request_tools(scenario: str) -> dict[str, str]:
    lines = (FIXTURES / scenario / "requests.jsonl").read_text().splitlines()
    messages = json.loads(lines[-1])["body"]["messages"]
    return {m["tool_call_id"]: "".join(p["text"] for p in m["content"]) for m in messages if m["role"] == "tool"}


@pytest.mark.parametrize("scenario", ["basic", "parallel", "errors"])
def test_historical_observations_are_the_tool_messages_the_model_saw(scenario: str) -> None:
    """format.model_text reproduces, byte for byte, what the real SDK sent (the recorded last request)."""
    trajectory = parse_conversation(FIXTURES / scenario / "conversation" / "base_state.json")
    seen = last_request_tools(scenario)
    calls = [call for batch in trajectory.batches for call in batch.calls]
    assert calls and all(call.historical is not None and call.historical.text == seen[call.call_id]
                         for call in calls)


def test_the_parallel_fixture_has_every_tool_and_its_batches() -> None:
    trajectory = parse_conversation(FIXTURES / "parallel" / "conversation" / "base_state.json")
    assert [[c.name for c in b.calls] for b in trajectory.batches] == [
        ["terminal", "file_editor"], ["task_tracker"], ["terminal", "file_editor"], ["think"],
        ["file_editor", "terminal"]]
    assert all(c.policy is CallPolicy.FRESH for b in trajectory.batches for c in b.calls)
    assert trajectory.batches[2].calls[1].historical is not None and trajectory.batches[2].calls[1].historical.is_error
    assert trajectory.cwd == "/tmp/forkpoint-rec-openhands-sdk/parallel" and trajectory.version is None
    final = trajectory.next_actions[-1]
    assert final is not None and final.tools[0][0] == "finish"  # finish is the next action, not a batch
    assert guess_agent(FIXTURES / "parallel" / "conversation" / "base_state.json") == "openhands-sdk"


def _events(base_state: Path) -> list[Path]:
    return sorted((base_state.parent / "events").glob("event-*.json"))


def test_an_event_file_that_is_a_link_is_refused_unread(tmp_path: Path) -> None:
    base_state = conversation("basic", tmp_path)
    secret = tmp_path / "secret.json"
    target = _events(base_state)[3]
    secret.write_text(target.read_text())
    target.unlink()
    target.symlink_to(secret)
    with pytest.raises(ReplayError, match="cannot read the OpenHands SDK event"):
        parse_conversation(base_state)


def test_an_events_folder_that_is_a_link_is_refused(tmp_path: Path) -> None:
    base_state = conversation("basic", tmp_path)
    events = base_state.parent / "events"
    events.rename(tmp_path / "elsewhere")
    events.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ReplayError, match="not a directory"):
        parse_conversation(base_state)


def test_a_fifo_in_place_of_an_event_is_refused_without_blocking(tmp_path: Path) -> None:
    base_state = conversation("basic", tmp_path)
    target = _events(base_state)[2]
    target.unlink()
    os.mkfifo(target)
    with pytest.raises(ReplayError, match="cannot read the OpenHands SDK event"):
        parse_conversation(base_state)


def test_a_gap_in_the_event_numbers_is_refused(tmp_path: Path) -> None:
    base_state = conversation("basic", tmp_path)
    _events(base_state)[4].unlink()
    with pytest.raises(ReplayError, match="not numbered"):
        parse_conversation(base_state)


def test_an_event_whose_content_is_not_its_file_name_is_refused(tmp_path: Path) -> None:
    base_state = conversation("basic", tmp_path)
    target = _events(base_state)[2]
    event = json.loads(target.read_text())
    event["id"] = "../../../../tmp/planted"
    target.write_text(json.dumps(event))
    with pytest.raises(ReplayError, match="does not hold the event its name says"):
        parse_conversation(base_state)


def test_a_path_shaped_event_id_in_a_bundle_is_refused(tmp_path: Path) -> None:
    trajectory = parse_conversation(FIXTURES / "basic" / "conversation" / "base_state.json")
    events = [dict(e) for e in trajectory.native.events]
    events[2]["id"] = "../../aaaaaaaa"
    bundle = tmp_path / "bundle.json"
    bundle.write_text(json.dumps({"schema": "forkpoint.openhands-sdk-conversation/v1",
                                  "base_state": trajectory.native.base_state, "events": events}))
    with pytest.raises(ReplayError, match="no id of the SDK's shape"):
        parse_conversation(bundle)


def test_a_conversation_id_that_is_no_uuid_is_refused(tmp_path: Path) -> None:
    base_state = conversation("basic", tmp_path)
    state = json.loads(base_state.read_text())
    state["id"] = "../../x"
    base_state.write_text(json.dumps(state))
    with pytest.raises(ReplayError, match="no UUID id"):
        parse_conversation(base_state)


def test_huge_events_stop_at_the_input_limit(tmp_path: Path) -> None:
    """The limit counts base_state.json and every event together; a huge event is refused at its size."""
    base_state = conversation("basic", tmp_path)
    target = _events(base_state)[3]
    event = json.loads(target.read_text())
    event["observation"]["content"][0]["text"] = "x" * 3_000_000
    target.write_text(json.dumps(event))
    with pytest.raises(ReplayError, match="exceeds the input limit"):
        parse_conversation(base_state, max_bytes=2_000_000)
    assert parse_conversation(base_state, max_bytes=8_000_000).batches[0].calls[0].historical is not None


def test_stray_files_in_the_events_folder_are_ignored(tmp_path: Path) -> None:
    """The SDK's own lock and length-marker files (and anything not named like an event) are not events."""
    base_state = conversation("basic", tmp_path)
    events = base_state.parent / "events"
    (events / ".eventlog.lock").write_text("")
    (events / "event-00001-zz.json").write_text("not json")  # not the SDK's name shape
    os.mkfifo(events / "notes.fifo")
    assert len(parse_conversation(base_state).batches) == 4


def test_two_files_at_one_position_are_refused(tmp_path: Path) -> None:
    """The SDK pads to five digits but does not cap the width: 00001 and 000001 are the same position."""
    base_state = conversation("basic", tmp_path)
    first = _events(base_state)[1]
    shutil.copy(first, first.with_name(first.name.replace("event-00001-", "event-000001-")))
    with pytest.raises(ReplayError, match="two OpenHands SDK events at position 1"):
        parse_conversation(base_state)


def test_calls_the_sdk_refused_are_re_validated_not_reused() -> None:
    """An invalid or unknown tool call has no action and an AgentErrorEvent: the SDK's own validation re-runs it."""
    trajectory = parse_conversation(FIXTURES / "errors" / "conversation" / "base_state.json")
    invalid, unknown = trajectory.batches[3].calls[0], trajectory.batches[4].calls[0]
    assert (invalid.policy, unknown.policy) == (CallPolicy.FRESH, CallPolicy.FRESH)
    assert invalid.historical is not None and invalid.historical.text.startswith("Error validating tool 'file_editor'")
    assert unknown.historical is not None and unknown.historical.text.startswith("Tool 'no_such_tool' not found")
