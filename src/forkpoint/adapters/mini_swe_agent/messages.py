"""mini-swe-agent trajectory JSON -> OpenAI chat messages (for `forkpoint export`; pure).

Its ``messages`` are already the chat the model saw (system, task, assistant actions, observations as user or
``tool`` messages): they are copied with their chat fields only (mini's ``extra`` bookkeeping dropped), content
flattened to text. Roles chat does not know (mini 1.x's ``exit``) are left out and noted.
"""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.export.chat import ChatMessage, Conversation, assistant, flatten, tool, tool_call


def to_chat(data: bytes) -> Conversation:
    document = orjson.loads(data)
    conversation = Conversation()
    rows = document.get("messages") if isinstance(document, dict) else None
    for message in rows if isinstance(rows, list) else []:
        converted = chat_message(message, conversation)
        if converted is not None:
            conversation.messages.append(converted)
    info = document.get("info") if isinstance(document, dict) else None
    config = info.get("config") if isinstance(info, dict) else None
    model = config.get("model") if isinstance(config, dict) else None
    if isinstance(model, dict) and isinstance(model.get("model_name"), str):
        conversation.model = model["model_name"]
    return conversation


def chat_message(message: Any, conversation: Conversation) -> ChatMessage | None:
    """One chat-shaped native message (mini-swe-agent, SWE-agent) with only its chat fields."""
    if not isinstance(message, dict):
        return None
    role = message.get("role")
    text = flatten(message.get("content"))
    if role in ("system", "user"):
        return {"role": role, "content": text}
    if role == "assistant":
        calls = [
            tool_call(str(call.get("id", "")), str(function.get("name", "")), function.get("arguments", "{}"))
            for call in message.get("tool_calls") or []
            if isinstance(call, dict) and isinstance(function := call.get("function"), dict)
        ]
        blocks = message.get("thinking_blocks")
        blocks = blocks if isinstance(blocks, list) else []
        thoughts = [str(block.get("thinking", "")) for block in blocks if isinstance(block, dict)]
        reasoning = message.get("reasoning_content") or "\n".join(thoughts)
        return assistant(text, str(reasoning or ""), calls)
    if role == "tool":
        ids = message.get("tool_call_ids")
        call_id = message.get("tool_call_id") or (ids[0] if isinstance(ids, list) and ids else "")
        return tool(str(call_id), text)
    note = f"messages with role {role!r} left out"
    if note not in conversation.notes:
        conversation.notes.append(note)
    return None
