"""mini-swe-agent's Chat Completions profile for the one chat gate (pure data + its projection).

mini-swe-agent has no resume envelope: the companion seeds ``agent.messages`` with the rebuilt prefix and steps
on, so litellm's first request must carry exactly the rebuilt prefix (plus the boundary prompt as one user
message, when given) and nothing after it. What the model sees of a message is what the package sends
(measured against the recorded requests in tests/fixtures/mini_swe_agent/*/requests.jsonl):

* 1.x from 1.17: ``{"role", "content"}`` of every message (``LitellmModel.query`` drops timestamps and extras);
* 1.x before 1.17 (measured on 1.15.0): the stored message whole, ``extra`` included (1.15's ``query`` passes
  ``agent.messages`` unchanged, so an assistant message's ``extra.response`` goes back to the model); 1.16.x is
  unmeasured: ``forkpoint agents calibrate`` decides;
* 2.x: the message without ``extra`` (``_prepare_messages_for_api``); litellm then drops null-valued keys
  (``function_call``, ``provider_specific_fields``).

The form is the SENDING release's (the continuing binary, or the release a calibration runs in a verified
version's place: ``wire_form``), not the recording's (a 1.15 recording continued on 1.17.5 is compared as role
+ content), and the result names it (``gate_wire_form``). Both sides are projected the same way (keys with null
values dropped); the system message is part of the compared prefix. Bodies are forwarded unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from forkpoint.bridge.protocols.openai_chat import ChatProfile, ExpectedChat
from forkpoint.core.model import JsonObject
from forkpoint.core.releases import number

#: how a release sends a stored message (module docstring)
ROLE_CONTENT = "role and content"
WHOLE = "the message whole (extra included)"
WITHOUT_EXTRA = "the message without extra"


def wire_form(release: str | None, major: int) -> str:
    """The form ``release`` sends stored messages in; a release without a number: its major line's verified form."""
    parsed = number(release)
    if parsed is None:
        return ROLE_CONTENT if major < 2 else WITHOUT_EXTRA
    if parsed[0] >= 2:
        return WITHOUT_EXTRA
    return WHOLE if parsed < (1, 17, 0) else ROLE_CONTENT


def wire_message(message: JsonObject, major: int, form: str | None = None) -> JsonObject:
    """The part of a native message the package sends to the model (see module docstring)."""
    form = form or wire_form(None, major)
    if form == ROLE_CONTENT:
        return {"role": message.get("role"), "content": message.get("content")}
    if form == WHOLE:
        return dict(message)
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
                         boundary_prompt: str | None = None, *, form: str | None = None) -> ExpectedChat:
    """The conversation the first request must carry: the rebuilt prefix (+ the boundary prompt message), each
    message in the sender's ``form`` (default: the verified form of the recording's major line)."""
    messages = [project(wire_message(m, major, form)) for m in native_messages]
    if boundary_prompt:
        messages.append({"role": "user", "content": boundary_prompt})
    return ExpectedChat.of(profile, messages)
