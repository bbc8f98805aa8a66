"""The mini-swe-agent bridge gate (pure): Chat Completions requests from the continued agent, checked exactly.

mini-swe-agent has no resume envelope: the companion seeds ``agent.messages`` with the rebuilt prefix and steps
on, so litellm's first request must carry exactly the rebuilt prefix (plus the boundary prompt as one user
message, when given) and nothing after it. What the model sees of a message is what the package sends
(measured against the recorded requests in tests/fixtures/mini_swe_agent/*/requests.jsonl):

* 1.x: ``{"role", "content"}`` of every message (``LitellmModel.query`` drops timestamps and extras);
* 2.x: the message without ``extra`` (``_prepare_messages_for_api``); litellm then drops null-valued keys
  (``function_call``, ``provider_specific_fields``).

Both sides are projected the same way (keys with null values dropped) and compared message by message; the first
difference is named. Later requests must still start with the same prefix. Bodies are forwarded unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from forkpoint.bridge.gate import Gate, Refusal, Verdict, checked, open_request
from forkpoint.hashing import canonical_sha256
from forkpoint.model import JsonObject

ROUTES = frozenset({"/v1/chat/completions", "/chat/completions"})


def wire_message(message: JsonObject, major: int) -> JsonObject:
    """The part of a native message the package sends to the model (see module docstring)."""
    if major < 2:
        return {"role": message.get("role"), "content": message.get("content")}
    return {key: value for key, value in message.items() if key != "extra"}


def project(message: Any) -> Any:
    """Null-valued keys dropped (litellm omits them on the wire), recursively in dicts; lists kept in order."""
    if isinstance(message, dict):
        return {key: project(value) for key, value in message.items() if value is not None}
    if isinstance(message, list):
        return [project(item) for item in message]
    return message


@dataclass(frozen=True)
class ExpectedChat:
    """The conversation the first request must carry: the rebuilt prefix (+ the boundary prompt message)."""

    profile: str
    messages: tuple[JsonObject, ...]

    @property
    def sha256(self) -> str:
        return canonical_sha256(list(self.messages))

    @classmethod
    def from_native(cls, profile: str, native_messages: Sequence[JsonObject], major: int,
                    boundary_prompt: str | None = None) -> ExpectedChat:
        messages = [project(wire_message(m, major)) for m in native_messages]
        if boundary_prompt:
            messages.append({"role": "user", "content": boundary_prompt})
        return cls(profile, tuple(messages))


def _describe(message: Any) -> str:
    if not isinstance(message, dict):
        return type(message).__name__
    role = message.get("role")
    if message.get("tool_call_id"):
        return f"{role} result for {message['tool_call_id']}"
    return str(role)


def _difference(want: JsonObject, got: Any) -> str:
    if not isinstance(got, dict):
        return f"it is a {type(got).__name__}, not a message object"
    if want.get("role") != got.get("role"):
        return f"role is {got.get('role')!r}, expected {want.get('role')!r}"
    for key in sorted(set(want) | set(got)):
        if want.get(key) != got.get(key):
            if key not in got:
                return f"its {key!r} is missing"
            if key not in want:
                return f"it has an unexpected {key!r}"
            return f"its {key!r} differs"
    return "it differs"


def compare(expected: ExpectedChat, body: Any, *, first: bool, facts: JsonObject) -> JsonObject:
    """Refuse unless ``body.messages`` starts with (first request: equals) the expected conversation."""
    request, messages = open_request(body, shape="the request has no list of messages", objects=False)
    want = expected.messages
    facts.update(expected_messages=len(want), request_messages=len(messages), prefix_sha256=expected.sha256)
    for index, message in enumerate(messages[: len(want)]):
        got = project(message)
        if got != want[index]:
            raise Refusal(f"message {index} ({_describe(want[index])}) differs from the rebuilt prefix: "
                          f"{_difference(want[index], got)}")
    if len(messages) < len(want):
        raise Refusal(f"message {len(messages)} ({_describe(want[len(messages)])}) is missing: the request has "
                      f"{len(messages)} messages, the rebuilt prefix {len(want)}")
    if first and len(messages) > len(want):
        raise Refusal(f"message {len(want)} ({_describe(messages[len(want)])}) is extra: the first request must end "
                      "at the end of the rebuilt prefix")
    facts["continuation_messages"] = len(messages) - len(want)
    return request


class MiniChatGate(Gate):
    """Chat Completions requests from a continued mini-swe-agent (1.x and 2.x)."""

    name = "openai-chat"
    model_routes = ROUTES

    def __init__(self, expected: ExpectedChat) -> None:
        self.expected = expected

    def first(self, body: Any) -> Verdict:
        return checked(self.expected.profile, True, lambda facts: compare(self.expected, body, first=True,
                                                                         facts=facts))

    def later(self, body: Any) -> Verdict:
        return checked(self.expected.profile, False, lambda facts: compare(self.expected, body, first=False,
                                                                          facts=facts))
