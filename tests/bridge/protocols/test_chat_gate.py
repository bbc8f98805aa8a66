"""The one Chat Completions gate on synthetic profiles: each profile feature, and the rules every profile shares.

The agent profiles themselves are tested on their real recorded requests in tests/adapters/*/test_gate.py.
"""

from __future__ import annotations

import copy
from typing import Any

from forkpoint.bridge.protocols.openai_chat import ChatGate, ChatProfile, ExpectedChat, Forbidden, explain

NONCE = "__forkpoint_nonce_00112233445566778899aabbccddeeff__"
PREFIX: list[dict[str, Any]] = [
    {"role": "user", "content": "task"},
    {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "a.txt\n"},
]
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]


def identity(message: Any, _index: int) -> Any:
    return message


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


PLAIN = ChatProfile(agent="Plain", project=identity)
ENVELOPED = ChatProfile(agent="Enveloped", project=identity, system="required", nonce_message=user,
                        forbidden=(Forbidden("tool", "[interrupted]", "an interrupted tool result"),),
                        helpers_without_tools=True, verified=frozenset({"env/1"}))


def body(*messages: Any, **top: Any) -> dict[str, Any]:
    return {"model": "m", "tools": TOOLS, "messages": copy.deepcopy(list(messages)), **top}


def test_a_profile_without_envelope_forwards_the_exact_prefix_unchanged() -> None:
    gate = ChatGate(PLAIN, ExpectedChat.of("plain/1", PREFIX))
    first = gate.first(body(*PREFIX))
    assert first.ok and first.body == body(*PREFIX) and first.facts["continuation_messages"] == 0
    assert "follows the boundary" in (gate.first(body(*PREFIX, user("more"))).reason or "")
    later = gate.later(body(*PREFIX, {"role": "assistant", "content": "done"}))
    assert later.ok and later.facts["continuation_messages"] == 1
    retry = gate.later(body(*PREFIX))  # the same rule in every gate: a retry of the validated prefix
    assert retry.ok and retry.facts["continuation_messages"] == 0
    assert "messages[2] (the tool result for c1) is missing" in (gate.later(body(*PREFIX[:2])).reason or "")


def test_the_nonce_envelope_is_stripped_or_replaced_by_the_boundary_prompt() -> None:
    system = {"role": "system", "content": "You are an agent."}
    expected = ExpectedChat.of("env/1", PREFIX, nonce=NONCE, model="m", tools=["bash"])
    stripped = ChatGate(ENVELOPED, expected).first(body(system, *PREFIX, user(NONCE)))
    assert stripped.ok and stripped.body == body(system, *PREFIX) and stripped.facts["nonce_index"] == 4
    prompted = ChatGate(ENVELOPED, expected, "Go on.").first(body(system, *PREFIX, user(NONCE)))
    assert prompted.ok and prompted.body == body(system, *PREFIX, user("Go on."))
    gate = ChatGate(ENVELOPED, expected)
    assert gate.first(body(system, *PREFIX, user(NONCE))).ok
    changed = gate.later(body({**system, "content": "other"}, *PREFIX, user(NONCE)))
    assert changed.reason == "the system prompt changed since the first request"
    interrupted = gate.later(body(system, *PREFIX, user(NONCE), {"role": "tool", "tool_call_id": "x",
                                                                  "content": "[interrupted]"}))
    assert interrupted.reason == "messages[5] is an interrupted tool result"
    assert "not Enveloped's single system message" in (gate.first(body(*PREFIX, user(NONCE))).reason or "")
    assert "asks for model 'x'" in (gate.first({**body(system, *PREFIX, user(NONCE)), "model": "x"}).reason or "")
    assert "enabled tool set" in (gate.first(body(system, *PREFIX, user(NONCE), tools=[])).reason or "")
    history = gate.first(body(system, *PREFIX, user(NONCE), previous_response_id="r"))
    assert "previous_response_id" in (history.reason or "")


def test_profile_and_configuration_checks() -> None:
    unverified = ChatGate(ENVELOPED, ExpectedChat.of("env/2", PREFIX, nonce=NONCE))
    assert unverified.first(body(*PREFIX)).reason == "no verified resume envelope profile 'env/2' for Enveloped"
    no_nonce = ChatGate(PLAIN, ExpectedChat.of("plain/1", PREFIX), "prompt")
    assert "configured inconsistently" in (no_nonce.first(body(*PREFIX)).reason or "")


def test_helper_requests_are_auxiliary_only_for_profiles_that_declare_them() -> None:
    expected = ExpectedChat.of("env/1", PREFIX, nonce=NONCE)
    title = {"model": "m", "messages": [user("name this")]}
    assert ChatGate(PLAIN, ExpectedChat.of("plain/1", PREFIX)).auxiliary(title) is None
    helper = ChatGate(ENVELOPED, expected).auxiliary(title)
    assert helper is not None and helper.ok and helper.body == title
    carrying = ChatGate(ENVELOPED, expected).auxiliary({"messages": [user(NONCE)]})
    assert carrying is not None and not carrying.ok
    assert ChatGate(ENVELOPED, expected).auxiliary(body(*PREFIX)) is None


def test_explain_names_the_first_difference() -> None:
    tool = {"role": "tool", "tool_call_id": "c1", "content": "a"}
    assert explain(tool, {**tool, "content": "b"}) == "the observation of c1 differs (in 'content')"
    assert explain(tool, {"role": "user"}) == "role is 'user', expected 'tool'"
    assert explain(PREFIX[1], {**PREFIX[1], "name": "x"}) == "it has an unexpected 'name'"
    assert explain(PREFIX[1], {"role": "assistant", "content": ""}) == "its 'tool_calls' is missing"
    assert explain(PREFIX[0], "text") == "it is a str, not a message object"


def test_the_manifest_holds_no_message_bodies() -> None:
    manifest = ExpectedChat.of("env/1", PREFIX, nonce=NONCE, tools=["bash"]).to_json()
    assert manifest["boundary_call_ids"] == ["c1"] and manifest["message_roles"] == ["user", "assistant", "tool"]
    assert "a.txt" not in str(manifest) and "task" not in str(manifest)
