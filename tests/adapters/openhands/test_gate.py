"""The OpenHands gate against the REAL requests OpenHands 0.62.0 sent (tests/fixtures/openhands/*/requests.jsonl).

The expected conversation is built from the recorded prefix events; the recorded request that followed batch N
(the (N+1)-th request) must pass as a first request, the later ones as later requests, and any tampering fails.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.openhands.envelope import expected_messages
from forkpoint.adapters.openhands.gate import PROFILE
from forkpoint.adapters.openhands.parse import parse_events
from forkpoint.adapters.openhands.session import prefix_events
from forkpoint.bridge.protocols.openai_chat import ChatGate, ExpectedChat
from forkpoint.core.model import Mode, Plan

FIXTURES = Path(__file__).parents[2] / "fixtures" / "openhands" / "0.62.0"
SCENARIOS = ("basic", "parallel", "errors")


def requests(scenario: str) -> list[dict[str, Any]]:
    lines = (FIXTURES / scenario / "requests.jsonl").read_text().splitlines()
    return [json.loads(line)["body"] for line in lines]


def gate_for(scenario: str, after: int) -> ChatGate:
    parsed = parse_events(FIXTURES / scenario / "trajectory.json")
    plan = Plan(parsed, after, Mode.REPLAY_AND_CONTINUE, "p")
    return ChatGate(PROFILE, ExpectedChat.of("p", expected_messages(prefix_events(plan, None))))


def _cases() -> list[tuple[str, int]]:
    return [(s, n) for s in SCENARIOS for n in range(1, parse_events(FIXTURES / s / "trajectory.json").complete_count
                                                     + 1)]


@pytest.mark.parametrize(("scenario", "after"), _cases(), ids=lambda v: str(v))
def test_the_real_request_after_batch_n_passes(scenario: str, after: int) -> None:
    gate = gate_for(scenario, after)
    bodies = requests(scenario)
    verdict = gate.first(bodies[after])
    assert verdict.ok, verdict.reason
    assert verdict.body == bodies[after]
    for later in bodies[after + 1:]:
        assert gate.later(later).ok
    # the request of an earlier step is too short; a later one does not end at O'N
    assert not gate.first(bodies[after - 1]).ok
    if after + 1 < len(bodies):
        refused = gate.first(bodies[after + 1])
        assert not refused.ok and "must end at the last fresh observation" in (refused.reason or "")


def test_a_changed_observation_is_refused_and_named() -> None:
    body = copy.deepcopy(requests("basic")[2])
    body["messages"][3]["content"][0]["text"] += "tampered"
    verdict = gate_for("basic", 2).first(body)
    assert not verdict.ok and "messages[3]" in (verdict.reason or "") and "text" in (verdict.reason or "")


def test_a_changed_tool_call_is_refused() -> None:
    body = copy.deepcopy(requests("basic")[2])
    body["messages"][2]["tool_calls"][0]["id"] = "call_other"
    verdict = gate_for("basic", 2).first(body)
    assert not verdict.ok and "tool_calls" in (verdict.reason or "")


def test_a_changed_system_prompt_or_missing_message_is_refused() -> None:
    body = copy.deepcopy(requests("basic")[2])
    body["messages"][0]["content"][0]["text"] = "You are someone else."
    assert not gate_for("basic", 2).first(body).ok
    short = copy.deepcopy(requests("basic")[2])
    del short["messages"][-1]
    verdict = gate_for("basic", 2).first(short)
    assert not verdict.ok and "missing" in (verdict.reason or "")


@pytest.mark.parametrize("body", [None, [], {"messages": "x"}])
def test_malformed_bodies_are_refused(body: Any) -> None:
    assert not gate_for("basic", 1).first(body).ok


def test_a_later_request_that_adds_nothing_is_a_retry_of_the_first() -> None:
    """The rule of every gate (bridge.gate): the same validated prefix again forwards nothing unchecked."""
    bodies = requests("basic")
    gate = gate_for("basic", 2)
    assert gate.first(bodies[2]).ok
    retry = gate.later(bodies[2])
    assert retry.ok and retry.body == bodies[2] and retry.facts["continuation_messages"] == 0
    tampered = copy.deepcopy(bodies[2])
    tampered["messages"][1]["content"][0]["text"] += " (changed)"
    assert not gate.later(tampered).ok
