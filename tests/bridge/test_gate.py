"""The gate kit every agent's gate shares: the preamble, profiles, residue, and the Gate base's optional hook."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from forkpoint.bridge.gate import (
    Gate,
    Refusal,
    Verdict,
    checked,
    compare_prefix,
    helper_request,
    open_request,
    refuse_nonce_in,
    verified_profile,
)
from forkpoint.core.hashing import canonical_sha256

NONCE = "__forkpoint_nonce_00112233445566778899aabbccddeeff__"


@dataclass(frozen=True)
class EnvelopeProfile:
    version: str
    profile: str


# -- the preamble every gate shares --------------------------------------------------------------------------------


def refusal_of(call: Any) -> str:
    with pytest.raises(Refusal) as caught:
        call()
    return caught.value.reason


def test_open_request_checks_in_order_and_counts_the_nonce_once() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": NONCE}]}
    assert open_request(body, nonce=NONCE, boundary_prompt="go") == (body, body["messages"])
    assert refusal_of(lambda: open_request([], boundary_prompt=" ")) == "the configured boundary prompt is empty"
    assert refusal_of(lambda: open_request([])) == "the request body is not a JSON object"
    assert refusal_of(lambda: open_request({"messages": [1]})) == "the request has no list of message objects"
    assert open_request({"messages": [1]}, objects=False)[1] == [1]
    assert refusal_of(lambda: open_request({"input": {}}, key="input", shape="no input")) == "no input"

    def no_model(checked: dict[str, Any]) -> None:
        raise Refusal(f"model {checked['model']}")

    # the gate's own checks refuse before the nonce is counted
    assert refusal_of(lambda: open_request({**body, "x": NONCE}, nonce=NONCE, checks=no_model)) == "model m"
    assert refusal_of(lambda: open_request({**body, NONCE: 1}, nonce=NONCE)) == (
        "the resume nonce occurs 2 times in the request (expected exactly once)")
    assert "occurs 0 times" in refusal_of(lambda: open_request({"messages": []}, nonce=NONCE))
    assert open_request({"messages": []})[1] == []  # no nonce: nothing counted


def test_verified_profile_and_residue() -> None:
    profiles = {"1.0": EnvelopeProfile("1.0", "agent/1.0/v1")}
    assert verified_profile(profiles, "1.0", "agent/1.0/v1", "Agent") is profiles["1.0"]
    assert refusal_of(lambda: verified_profile(profiles, "1.0", "agent/1.0/v2", "Agent")) == (
        "no verified resume envelope profile 'agent/1.0/v2' for Agent 1.0")
    assert "for Agent 2.0" in refusal_of(lambda: verified_profile(profiles, "2.0", "agent/1.0/v1", "Agent"))
    refuse_nonce_in([{"role": "user", "content": "go on"}], NONCE)
    refuse_nonce_in(None, NONCE)
    assert refusal_of(lambda: refuse_nonce_in([{"content": f"say {NONCE}"}], NONCE)) == (
        "the resume nonce remains in the cleaned request")


def test_checked_turns_a_refusal_into_a_verdict_with_its_facts() -> None:
    def clean(facts: dict[str, Any]) -> dict[str, Any]:
        facts["seen"] = True
        raise Refusal("no")

    assert checked("p/1", True, clean) == Verdict(False, None, "no", {"profile": "p/1", "first_request": True,
                                                                       "seen": True})
    assert checked("p/1", False, lambda facts: {"ok": 1}) == Verdict(True, {"ok": 1}, None,
                                                                       {"profile": "p/1", "first_request": False})


def test_gate_base_declares_auxiliary_as_a_model_request_by_default() -> None:
    class Plain(Gate):
        name = "plain"
        model_routes = frozenset({"/x"})

        def first(self, body: Any) -> Verdict:
            return Verdict(True, body, None)

        def later(self, body: Any) -> Verdict:
            return Verdict(True, body, None)

    assert Plain().auxiliary({"messages": []}) is None


def test_a_prefix_comparison_names_the_first_differing_missing_or_extra_entry_at_its_request_index() -> None:
    """compare_prefix (the Chat Completions and Gemini gates): the refusal points at the request's own index."""
    wanted = [{"n": 0}, {"n": 1}]

    def compare(conversation: list[Any], exact: bool = True) -> str | None:
        try:
            compare_prefix("messages", wanted, [canonical_sha256(w) for w in wanted], canonical_sha256(wanted),
                           conversation, exact=exact, counted="messages after the system", offset=1,
                           describe=lambda entry: f"n={entry['n']}", explain=lambda want, got: f"{got} != {want}")
        except Refusal as refusal:
            return str(refusal)
        return None

    assert compare([{"n": 0}, {"n": 1}]) is None
    assert compare([{"n": 0}, {"n": 1}, {"n": 2}], exact=False) is None
    assert compare([{"n": 0}, {"n": 9}]) == ("messages[2] (n=1) differs from the rebuilt prefix: "
                                            "{'n': 9} != {'n': 1}")
    assert compare([{"n": 0}]) == ("messages[2] (n=1) is missing: the request has 1 messages after the system, "
                                   "the rebuilt prefix 2")
    assert compare([{"n": 0}, {"n": 1}, {"n": 2}]) == ("messages[3] (n=2) is extra: the request has 3 messages "
                                                      "after the system, the rebuilt prefix 2")


def test_a_helper_request_without_tools_is_forwarded_unchanged_unless_it_carries_the_nonce() -> None:
    """helper_request (the Chat Completions and Gemini gates' ``auxiliary``): only for a profile that has them."""
    body = {"messages": [{"role": "user", "content": "title this"}]}
    forwarded = helper_request(body, True, "NONCE-1", "p", "no-tools helper request")
    assert forwarded is not None and forwarded.ok and forwarded.body is body
    assert forwarded.facts == {"profile": "p", "first_request": False, "auxiliary": "no-tools helper request"}
    leaking = helper_request({"messages": [{"content": "x NONCE-1"}]}, True, "NONCE-1", "p", "helper")
    assert leaking is not None and not leaking.ok and leaking.reason == ("a helper request (no tools) carries the "
                                                                         "resume nonce")
    assert helper_request({**body, "tools": [{}]}, True, "NONCE-1", "p", "helper") is None  # a model request
    assert helper_request(body, False, "NONCE-1", "p", "helper") is None
