"""OpenHands SDK conversation bundle -> OpenAI chat messages (for `forkpoint export`; pure).

As the SDK's ``LLMConvertibleEvent.events_to_messages`` builds them: the system prompt (its tool definitions kept
as the conversation's tools), user and agent messages, one assistant message per model response (the first
action's thought and reasoning, every action's tool call), and per observation a ``tool`` message with the text
the model saw (forkpoint.adapters.openhands_sdk.format).
"""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.adapters.kit.jsondoc import as_object
from forkpoint.adapters.openhands_sdk.format import OBSERVATION_KINDS, model_text
from forkpoint.export.chat import Conversation, assistant, system, tool, tool_call, user


def _joined(parts: Any) -> str:
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict)) if isinstance(parts, list) else ""


def to_chat(data: bytes) -> Conversation:
    document = orjson.loads(data)
    conversation = Conversation()
    events = document.get("events") if isinstance(document, dict) else None
    model = as_object(as_object(as_object(document).get("base_state")).get("agent")).get("llm")
    if isinstance(as_object(model).get("model"), str):
        conversation.model = as_object(model)["model"]
    current: object = None
    for event in events if isinstance(events, list) else []:
        if not isinstance(event, dict):
            continue
        kind = event.get("kind")
        if kind == "SystemPromptEvent":
            conversation.messages.append(system(str(as_object(event.get("system_prompt")).get("text", ""))))
            if isinstance(event.get("tools"), list):
                conversation.tools = event["tools"]
        elif kind == "MessageEvent":
            current = None
            message = as_object(event.get("llm_message"))
            text = _joined(message.get("content"))
            conversation.messages.append(user(text) if message.get("role") == "user" else assistant(text))
        elif kind == "ActionEvent":
            call = as_object(event.get("tool_call"))
            made = tool_call(str(call.get("id", "")), str(call.get("name", "")), call.get("arguments", "{}"))
            rid = event.get("llm_response_id")
            if rid is not None and rid == current and conversation.messages:
                conversation.messages[-1].setdefault("tool_calls", []).append(made)
            else:
                conversation.messages.append(assistant(_joined(event.get("thought")),
                                                       str(event.get("reasoning_content") or ""), [made]))
            current = rid
        elif kind in OBSERVATION_KINDS:
            conversation.messages.append(tool(str(event.get("tool_call_id", "")), model_text(event)))
    return conversation
