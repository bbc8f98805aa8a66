"""mini-swe-agent's Chat Completions profile for the one chat gate (pure data + its projection).

mini-swe-agent has no resume envelope: the companion seeds ``agent.messages`` with the rebuilt prefix and steps
on, so litellm's first request must carry exactly the rebuilt prefix (plus the boundary prompt as one user
message, when given) and nothing after it. What the model sees of a message is what the package sends
(measured against the recorded requests in tests/fixtures/mini_swe_agent/*/requests.jsonl):

* 1.x: ``{"role", "content"}`` of every message (``LitellmModel.query`` drops timestamps and extras);
* 2.x: the message without ``extra`` (``_prepare_messages_for_api``); litellm then drops null-valued keys
  (``function_call``, ``provider_specific_fields``).

Both sides are projected the same way (keys with null values dropped); the system message is part of the compared
prefix. Bodies are forwarded unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from forkpoint.bridge.protocols.openai_chat import ChatProfile, ExpectedChat
from forkpoint.core.model import JsonObject


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


PROFILE = ChatProfile(agent="mini-swe-agent", project=lambda message, _index: project(message))


def expected_from_native(profile: str, native_messages: Sequence[JsonObject], major: int,
                         boundary_prompt: str | None = None) -> ExpectedChat:
    """The conversation the first request must carry: the rebuilt prefix (+ the boundary prompt message)."""
    messages = [project(wire_message(m, major)) for m in native_messages]
    if boundary_prompt:
        messages.append({"role": "user", "content": boundary_prompt})
    return ExpectedChat.of(profile, messages)
