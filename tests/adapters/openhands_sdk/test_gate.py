"""The first request a resumed OpenHands SDK must send, as measured on the real 1.58.2 (requests.jsonl)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint.adapters.kit.chat_message import project
from forkpoint.adapters.openhands_sdk.envelope import PrefixError, expected_messages
from forkpoint.adapters.openhands_sdk.parse import parse_conversation
from forkpoint.core.model import JsonObject

FIXTURES = Path(__file__).parents[2] / "fixtures" / "openhands-sdk" / "1.58.2"


def recorded(scenario: str) -> tuple[list[JsonObject], list[list[JsonObject]]]:
    events = list(parse_conversation(FIXTURES / scenario / "conversation" / "base_state.json").native.events)
    requests = [json.loads(line)["body"]["messages"] for line in
                (FIXTURES / scenario / "requests.jsonl").read_text().splitlines()]
    return events, requests


@pytest.mark.parametrize("scenario", ["basic", "parallel", "errors"])
def test_every_recorded_request_is_the_expected_conversation_of_its_events(scenario: str) -> None:
    """Request k is the conversation of the events before the k-th model response (each one checked)."""
    events, requests = recorded(scenario)
    starts = [i for i, e in enumerate(events) if e["kind"] == "ActionEvent"
              and (i == 0 or events[i - 1]["kind"] != "ActionEvent")]
    assert len(starts) == len(requests)
    for start, request in zip(starts, requests, strict=True):
        assert expected_messages(events[:start]) == [project(m) for m in request]


def test_a_changed_observation_no_longer_matches() -> None:
    events, requests = recorded("basic")
    request = json.loads(json.dumps(requests[2]))
    request[3]["content"][0]["text"] += "tampered"
    starts = [i for i, e in enumerate(events) if e["kind"] == "ActionEvent"]
    assert expected_messages(events[:starts[2]]) != [project(m) for m in request]


def test_unmodelled_events_are_refused() -> None:
    events, _ = recorded("basic")
    with pytest.raises(PrefixError, match="no model message"):
        expected_messages([*events[:4], {"kind": "Condensation", "id": "aaaaaaaa"}])
    with pytest.raises(PrefixError, match="SystemPromptEvent"):
        expected_messages(events[1:4])
