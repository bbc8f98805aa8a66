"""The chat gate with mini-swe-agent's profile: the projection matches what the real packages sent; every
deviation is refused."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.mini_swe_agent.gate import (
    PROFILE,
    ROLE_CONTENT,
    WHOLE,
    WITHOUT_EXTRA,
    expected_from_native,
    project,
    wire_form,
)
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
    """What mini sent before model turn k is exactly the projection of the messages before that turn, in the
    recording release's wire form (1.15.0 sends its stored messages whole, ``extra`` included)."""
    native = _native(requests.parent)
    form = wire_form(parse_trajectory(requests.parent / "trajectory.traj.json").version, native.major)
    recorded = [json.loads(line) for line in requests.read_text().splitlines()]
    starts = _turn_starts(native)
    assert len(recorded) == len(starts)
    for entry, start in zip(recorded, starts, strict=True):
        expected = expected_from_native("p", native.messages[:start], native.major, form=form)
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


def test_wire_form_is_the_sending_releases() -> None:
    assert [wire_form(v, int(v[0])) for v in ("1.15.0", "1.16.9", "1.17.0", "1.17.5", "2.2.8", "2.4.6")] == [
        WHOLE, WHOLE, ROLE_CONTENT, ROLE_CONTENT, WITHOUT_EXTRA, WITHOUT_EXTRA]
    assert wire_form(None, 1) == ROLE_CONTENT and wire_form("dev", 2) == WITHOUT_EXTRA


def test_v115_wire_keeps_extra_exactly_and_the_other_forms_refuse_it() -> None:
    """1.15 sends each assistant message's recorded ``extra``: the whole-message gate needs it verbatim; 1.17's
    role + content gate refuses a request carrying it (the calibration failure before this profile)."""
    directory = FIXTURES / "1.15.0" / "calibrate"
    native = _native(directory)
    sent = json.loads((directory / "requests.jsonl").read_text().splitlines()[2])["messages"]
    prefix = native.messages[:len(sent)]
    assert "extra" in sent[2] and "extra" in prefix[2]
    assert ChatGate(PROFILE, expected_from_native("p", prefix, 1, form=WHOLE)).first({"messages": sent}).ok
    refused = ChatGate(PROFILE, expected_from_native("p", prefix, 1)).first({"messages": sent})
    assert not refused.ok and refused.reason is not None and "unexpected 'extra'" in refused.reason
    stripped = [{k: v for k, v in m.items() if k != "extra"} for m in sent]
    assert not ChatGate(PROFILE, expected_from_native("p", prefix, 1, form=WHOLE)).first({"messages": stripped}).ok
    tampered = copy.deepcopy(sent)
    tampered[2]["extra"]["response"]["id"] = "forged"
    verdict = ChatGate(PROFILE, expected_from_native("p", prefix, 1, form=WHOLE)).first({"messages": tampered})
    assert not verdict.ok and verdict.reason is not None and "'extra' differs" in verdict.reason
