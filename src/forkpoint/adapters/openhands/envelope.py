"""The conversation a continued OpenHands 0.62.0 must send first, built from the rebuilt prefix events (pure).

Measured on the real 0.62.0 (tests/fixtures/openhands/0.62.0/*/requests.jsonl): litellm sends OpenAI Chat
Completions ``messages`` =

    system     [text = the system event's args.content]
    user       [text = the task]
    per model response in the prefix:
      assistant  [text = model_response message content] (empty list without text), tool_calls = the response's
                 calls (id, type "function", function {name, arguments as sent})
      tool       per call, in call order: [text = the observation as the model sees it], tool_call_id, name

(recall observations add nothing with prompt extensions off). Each message is projected to a canonical form
(role, joined text, tool calls with parsed arguments, tool_call_id, name); the chat gate (profile in gate.py)
compares the request's projection with this list (``ExpectedChat.of``).
"""

from __future__ import annotations

from forkpoint.adapters.kit.chat_message import project
from forkpoint.adapters.kit.jsondoc import as_object
from forkpoint.adapters.openhands.format import model_text
from forkpoint.adapters.openhands.parse import response_id
from forkpoint.core.model import JsonObject


class PrefixError(ValueError):
    """The prefix holds something whose model message forkpoint does not model (refuse, never guess)."""


def expected_messages(events: list[JsonObject]) -> list[JsonObject]:
    """Projected messages for the rebuilt prefix events (system event first)."""
    system = next((e for e in events if e.get("action") == "system"), None)
    if system is None or not isinstance(system.get("args"), dict):
        raise PrefixError("the prefix has no system event (its args.content is the system message)")
    messages: list[JsonObject] = [{"role": "system", "text": str(system["args"].get("content", ""))}]
    observations = {e.get("cause"): e for e in events if isinstance(e.get("observation"), str)
                    and e.get("source") != "environment"}
    seen_responses: set[str] = set()
    for event in events:
        action, source = event.get("action"), event.get("source")
        if not isinstance(action, str) or action in ("system", "recall"):
            continue
        if action == "message":
            args = as_object(event.get("args"))
            role = "user" if source == "user" else "assistant"
            messages.append({"role": role, "text": str(args.get("content", ""))})
            continue
        rid = response_id(event)
        if rid is None:
            raise PrefixError(f"action {event['id']} ({action}) has no model response to rebuild its message from")
        if rid not in seen_responses:
            seen_responses.add(rid)
            messages.append(_assistant(event))
        observation = observations.get(event["id"])
        if observation is None:
            raise PrefixError(f"action {event['id']} ({action}) has no observation in the prefix")
        metadata = event["tool_call_metadata"]
        messages.append({"role": "tool", "text": model_text(observation), "tool_call_id": metadata.get("tool_call_id"),
                         "name": metadata.get("function_name")})
    return messages


def _assistant(event: JsonObject) -> JsonObject:
    response = event["tool_call_metadata"]["model_response"]
    choices = response.get("choices") if isinstance(response, dict) else None
    message = choices[0].get("message") if isinstance(choices, list) and choices else None
    if not isinstance(message, dict):
        raise PrefixError(f"action {event['id']} has a model response without a message")
    content = message.get("content")
    projected = project({"role": "assistant", "content": [{"type": "text", "text": content}] if content else [],
                         "tool_calls": message.get("tool_calls")})
    return projected
