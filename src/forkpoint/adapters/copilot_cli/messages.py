"""Copilot CLI session-state events -> OpenAI chat messages (for `forkpoint export`; pure).

The conversation a resume rebuilds: ``system.message`` (the system prompt, which Copilot CLI stores), each
``user.message`` (its ``transformedContent``, what the model saw), each top-level ``assistant.message`` with its
tool requests, and each ``tool.execution_complete`` as a tool message (a success's ``result.content``, a failure's
``error.message``). Sub-agent events (``parentToolCallId``) are left out: the ``task`` call's answer stands for them.
"""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.core.fs import split_lines
from forkpoint.export.chat import ChatMessage, Conversation, assistant, system, tool, tool_call, user


def to_chat(data: bytes) -> Conversation:
    conversation = Conversation()
    for _number, _start, raw in split_lines(data):
        try:
            event = orjson.loads(raw) if raw.strip() else None
        except orjson.JSONDecodeError:
            continue
        if not isinstance(event, dict) or not isinstance(event.get("data"), dict) or event["data"].get(
                "parentToolCallId"):
            continue
        message = _message(str(event.get("type")), event["data"], conversation)
        if message is not None:
            conversation.messages.append(message)
    return conversation


def _message(kind: str, data: dict[str, Any], conversation: Conversation) -> ChatMessage | None:
    if kind == "system.message" and isinstance(data.get("content"), str):
        # logged after the first prompt, sent before it: the first one leads the conversation
        if not any(m.get("role") == "system" for m in conversation.messages):
            conversation.messages.insert(0, system(data["content"]))
        return None
    if kind == "user.message":
        text = data.get("transformedContent", data.get("content"))
        return user(text if isinstance(text, str) else "")
    if kind == "assistant.message":
        if isinstance(data.get("model"), str):
            conversation.model = data["model"]
        calls = [tool_call(str(r.get("toolCallId", "")), str(r.get("name", "")), r.get("arguments") or {})
                 for r in data.get("toolRequests") or [] if isinstance(r, dict)]
        reasoning = data.get("reasoningText")
        return assistant(str(data.get("content") or ""), reasoning if isinstance(reasoning, str) else "", calls)
    if kind == "tool.execution_complete":
        if data.get("success") is True:
            result = data.get("result")
            text = result.get("content") if isinstance(result, dict) else None
        else:
            error = data.get("error")
            text = error.get("message") if isinstance(error, dict) else None
        return tool(str(data.get("toolCallId", "")), text if isinstance(text, str) else "")
    return None
