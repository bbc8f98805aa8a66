"""Copilot CLI 1.0.102's Chat Completions profile for the one chat gate, and its expected prefix (pure).

Measured on the real binary (docs/adapters/copilot-cli.md, tests/fixtures/copilot_cli/1.0.102/tools/
resume-after-3.json): ``copilot --resume=<id> -p NONCE`` on its BYOK provider sends ``messages`` = its system
prompt (regenerated on every start: fingerprinted, not compared), then the conversation rebuilt from the event log:

* each ``user.message`` as ``{"role": "user", "content": <transformedContent>}``;
* each top-level ``assistant.message`` as ``{"role": "assistant", "content": <content or null>, "tool_calls":
  [{"id", "type": "function", "function": {"name", "arguments": <JSON text>}}]}`` (no ``tool_calls`` key without
  requests);
* after it, in the order of its requests, one ``{"role": "tool", "tool_call_id", "content", "__copilotMessageSource":
  {...}}`` per completed call: a success's ``result.content``, a failure's ``error.message``;
* then the prompt as a new user message ``<current_datetime>…</current_datetime>\\n\\nNONCE`` (the envelope: the
  datetime line is the CLI's own, regenerated per prompt). The gate swaps the nonce for the boundary prompt inside
  the same envelope, or removes the message, so the request ends at the last fresh observation.

Call arguments are compared parsed (the CLI re-serialises them); ``__copilotMessageSource`` (the CLI's own label
of the tool, sent along) and ``refusal: null`` are not part of the compared form, and no other key may appear.
Every request measured carried the tools: a request without them is gated like any other (no helper exemption).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from forkpoint.adapters.copilot_cli.parse import observation_of, tool_requests
from forkpoint.adapters.kit.chat_message import wire_tool_calls
from forkpoint.bridge.gate import Refusal
from forkpoint.bridge.protocols.openai_chat import ChatProfile, ExpectedChat
from forkpoint.core.model import JsonObject

PROFILE_ID = "copilot-cli/1.0.102/session-events-v1"
#: the envelope the CLI puts around every prompt (an ISO timestamp with milliseconds and offset)
_DATETIME = re.compile(r"<current_datetime>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?(?:Z|[+-]\d\d:\d\d)"
                       r"</current_datetime>\n\n")
_KEYS = {"user": {"role", "content"}, "assistant": {"role", "content", "tool_calls", "refusal"},
         "tool": {"role", "tool_call_id", "content", "__copilotMessageSource"}}


def copilot_projection(events: Sequence[JsonObject]) -> list[JsonObject]:
    """What Copilot CLI 1.0.102 sends for these (top-level) events when it resumes them."""
    completions: dict[str, JsonObject] = {}
    for event in events:
        data = event.get("data")
        if event.get("type") == "tool.execution_complete" and isinstance(data, dict):
            completions.setdefault(str(data.get("toolCallId")), data)
    out: list[JsonObject] = []
    for event in events:
        data = event.get("data")
        if not isinstance(data, dict) or data.get("parentToolCallId"):
            continue
        if event.get("type") == "user.message":
            text = data.get("transformedContent", data.get("content"))
            out.append({"role": "user", "content": text})
        elif event.get("type") == "assistant.message":
            requests = tool_requests(data, f"event {event.get('id')}")
            out.append({"role": "assistant", "content": data.get("content") or None,
                        "tool_calls": [{"id": r["toolCallId"], "name": r["name"], "arguments": r["arguments"]}
                                       for r in requests]})
            for request in requests:
                completion = completions.get(str(request["toolCallId"]))
                observation = None if completion is None else observation_of(completion)
                if observation is not None:
                    out.append({"role": "tool", "tool_call_id": request["toolCallId"],
                                "content": observation.content})
    return out


def wire_message(message: Any, index: int) -> JsonObject:
    """A request's conversation message (at ``messages[index]``) in the form of ``copilot_projection``."""
    role = message.get("role") if isinstance(message, dict) else None
    if not isinstance(message, dict) or role not in _KEYS:
        raise Refusal(f"messages[{index}] has role {role!r}, which a Copilot CLI session never produces there")
    extra = sorted(set(message) - _KEYS[role])
    if extra:
        raise Refusal(f"messages[{index}] carries {extra[0]!r}, which Copilot CLI never sends on a {role} message")
    if role == "user":
        return {"role": "user", "content": message.get("content")}
    if role == "tool":
        return {"role": "tool", "tool_call_id": message.get("tool_call_id"), "content": message.get("content")}
    if message.get("refusal") is not None:
        raise Refusal(f"messages[{index}] carries a refusal text, which the event log does not hold")
    calls = wire_tool_calls(message, index)
    return {"role": "assistant", "content": message.get("content") or None, "tool_calls": calls}


def nonce_message(text: str) -> JsonObject:
    return {"role": "user", "content": text}


def nonce_envelope(message: Any, nonce: str) -> Callable[[str], JsonObject] | None:
    """When ``message`` is exactly the CLI's prompt message around ``nonce`` (its ``<current_datetime>`` line, then
    the prompt): the same message around another text."""
    if not isinstance(message, dict) or set(message) != {"role", "content"} or message.get("role") != "user":
        return None
    content = message.get("content")
    if not isinstance(content, str) or not content.endswith(nonce):
        return None
    head = content[: len(content) - len(nonce)]
    if not _DATETIME.fullmatch(head):
        return None
    return lambda text: {"role": "user", "content": head + text}


PROFILE = ChatProfile(agent="Copilot CLI", project=wire_message, system="required", nonce_message=nonce_message,
                      nonce_envelope=nonce_envelope, verified=frozenset({PROFILE_ID}))


def expected_prefix(events: Sequence[JsonObject], nonce: str | None, model: str | None = None) -> ExpectedChat:
    """The conversation the first request must carry (``nonce``: the continuation's ``-p NONCE``)."""
    projected = copilot_projection(events)
    if not projected or projected[-1]["role"] != "tool":
        raise ValueError("a rebuilt Copilot CLI prefix must end with the tool results of its last batch")
    return ExpectedChat.of(PROFILE_ID, projected, nonce=nonce, model=model)
