"""OpenHands V0 event list -> OpenAI chat messages (for `forkpoint export`; pure).

As OpenHands' ``ConversationMemory`` builds them: the ``system`` action's content (and its ``tools``, kept as the
conversation's tool definitions), user ``message`` actions, one assistant message per model response (its text,
reasoning and tool calls, from the ``tool_call_metadata.model_response`` shared by the actions of one response),
and per observation of a call a ``tool`` message with the text the model saw (forkpoint.adapters.openhands.format).
Agent messages without a call (the final answer) are assistant text.
"""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.adapters.openhands.format import model_text
from forkpoint.export.chat import Conversation, assistant, flatten, system, tool, tool_call, user


def to_chat(data: bytes) -> Conversation:
    events = orjson.loads(data)
    conversation = Conversation()
    seen_responses: set[str] = set()
    for event in events if isinstance(events, list) else []:
        if not isinstance(event, dict):
            continue
        args: dict[str, Any] = event["args"] if isinstance(event.get("args"), dict) else {}
        metadata = event.get("tool_call_metadata")
        if event.get("action") == "system":
            conversation.messages.append(system(flatten(args.get("content"))))
            if isinstance(args.get("tools"), list):
                conversation.tools = args["tools"]
        elif isinstance(metadata, dict) and "observation" in event:
            conversation.messages.append(tool(str(metadata.get("tool_call_id", "")), model_text(event)))
        elif isinstance(metadata, dict) and "action" in event:
            raw = metadata.get("model_response")
            response: dict[str, Any] = raw if isinstance(raw, dict) else {}
            key = str(response.get("id", metadata.get("tool_call_id")))
            if key not in seen_responses:
                seen_responses.add(key)
                conversation.messages.append(_response(response, conversation))
        elif event.get("action") == "message":
            text = flatten(args.get("content"))
            conversation.messages.append(user(text) if event.get("source") == "user" else assistant(text))
    return conversation


def _response(response: dict[str, Any], conversation: Conversation) -> dict[str, Any]:
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    message: dict[str, Any] = first["message"] if isinstance(first.get("message"), dict) else {}
    if isinstance(response.get("model"), str):
        conversation.model = response["model"]
    calls = [
        tool_call(str(call.get("id", "")), str(function.get("name", "")), function.get("arguments", "{}"))
        for call in message.get("tool_calls") or []
        if isinstance(call, dict) and isinstance(function := call.get("function"), dict)
    ]
    return assistant(flatten(message.get("content")), str(message.get("reasoning_content") or ""), calls)
