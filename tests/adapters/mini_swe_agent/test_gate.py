"""The chat gate with mini-swe-agent's profile: the projection matches what the real packages sent; every
deviation is refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.mini_swe_agent.gate import PROFILE, expected_from_native, project
from forkpoint.adapters.mini_swe_agent.parse import MiniNative, parse_trajectory
from forkpoint.bridge.protocols.openai_chat import ChatGate, ExpectedChat

FIXTURES = Path(__file__).parents[2] / "fixtures" / "mini_swe_agent"
RECORDINGS = sorted(FIXTURES.glob("*/*/requests.jsonl"))


def _native(directory: Path) -> MiniNative:
    native = parse_trajectory(directory / "trajectory.traj.json").native
    assert isinstance(native, MiniNative)
    return native


def _turn_starts(native: MiniNative) -> list[int]:
    return [turn.index for turn in native.turns]


@pytest.mark.parametrize("requests", RECORDINGS, ids=lambda p: f"{p.parent.parent.name}-{p.parent.name}")
def test_projection_equals_every_recorded_request(requests: Path) -> None:
    """What mini sent before model turn k is exactly the projection of the messages before that turn."""
    native = _native(requests.parent)
    recorded = [json.loads(line) for line in requests.read_text().splitlines()]
    starts = _turn_starts(native)
    assert len(recorded) == len(starts)
    for entry, start in zip(recorded, starts, strict=True):
        expected = expected_from_native("p", native.messages[:start], native.major)
        verdict = ChatGate(PROFILE, expected).first({"model": "openai/scripted", "messages": entry["messages"]})
        assert verdict.ok, (entry["step"], verdict.reason)


def _expected(version: str = "2.4.6", scenario: str = "parallel", end: int = 9) -> tuple[ExpectedChat, list[Any]]:
    native = _native(FIXTURES / version / scenario)
    expected = expected_from_native("p", native.messages[:end], native.major)
    return expected, [copy.deepcopy(m) for m in expected.messages]


def test_exact_first_request_passes_and_is_forwarded_unchanged() -> None:
    expected, messages = _expected()
    body = {"model": "openai/scripted", "messages": messages, "tools": [{"type": "function"}]}
    verdict = ChatGate(PROFILE, expected).first(body)
    assert verdict.ok and verdict.body == body
    assert verdict.facts["message_count"] == len(messages) and verdict.facts["first_request"] is True


@pytest.mark.parametrize(("tamper", "needle"), [
    (lambda m: m[-1].update(content=m[-1]["content"] + " "), "messages[8] (the tool result for"),
    (lambda m: m.pop(), "is missing"),
    (lambda m: m.append({"role": "user", "content": "Continue."}),
     "messages[9] (the user message) follows the boundary"),
    (lambda m: m[1].update(role="system"), "role is 'system', expected 'user'"),
    (lambda m: m[2]["tool_calls"][1]["function"].update(arguments='{"command": "rm -rf /"}'), "'tool_calls' differs"),
    (lambda m: m[3].pop("tool_call_id"), "'tool_call_id' is missing"),
    (lambda m: m.__setitem__(4, "not a message"), "not a message object"),
    (lambda m: m.reverse(), "messages[0]"),
])
def test_any_deviation_in_the_first_request_is_refused(tamper: Any, needle: str) -> None:
    expected, messages = _expected()
    tamper(messages)
    verdict = ChatGate(PROFILE, expected).first({"messages": messages})
    assert not verdict.ok and verdict.body is None and verdict.reason is not None
    assert needle in verdict.reason, verdict.reason


def test_bodies_without_messages_are_refused() -> None:
    expected, _ = _expected()
    gate = ChatGate(PROFILE, expected)
    bodies: tuple[Any, ...] = (None, [], {"messages": "x"}, {"input": []})
    for body in bodies:
        verdict = gate.first(body)
        assert not verdict.ok


def test_later_requests_must_keep_the_prefix() -> None:
    expected, messages = _expected()
    gate = ChatGate(PROFILE, expected)
    grown = [*messages, {"role": "assistant", "content": "next", "tool_calls": None},
             {"role": "tool", "tool_call_id": "x", "content": "y"}]
    later = gate.later({"messages": grown})
    assert later.ok and later.facts["continuation_messages"] == 2
    assert not gate.first({"messages": grown}).ok
    grown[5] = {**grown[5], "content": "rewritten history"}
    refused = gate.later({"messages": grown})
    assert not refused.ok and refused.reason is not None and "messages[5]" in refused.reason


def test_boundary_prompt_is_one_trailing_user_message_and_v1_projection() -> None:
    native = _native(FIXTURES / "1.17.5" / "basic")
    expected = expected_from_native("p", native.messages[:4], native.major, "Look again.")
    wire = [{"role": m["role"], "content": m["content"]} for m in native.messages[:4]]
    assert ChatGate(PROFILE, expected).first({"messages": [*wire, {"role": "user", "content": "Look again."}]}).ok
    refused = ChatGate(PROFILE, expected).first({"messages": wire})
    assert not refused.ok and refused.reason is not None and "missing" in refused.reason
    with_timestamps = [dict(m, timestamp=1.0) for m in wire]  # 1.x sends role + content only
    assert not ChatGate(PROFILE, expected).first({"messages": [*with_timestamps,
                                                          {"role": "user", "content": "Look again."}]}).ok


def test_project_drops_nulls_recursively_only() -> None:
    assert project({"a": None, "b": [{"c": None, "d": 0}], "e": ""}) == {"b": [{"d": 0}], "e": ""}
