"""Pi v3 session JSONL -> OpenAI chat messages (for `forkpoint export`; pure).

``message`` lines carry ``user`` / ``assistant`` / ``toolResult`` messages: assistant ``thinking`` blocks become
``reasoning_content``, ``toolCall`` blocks tool calls; each ``toolResult`` a ``tool`` message. Pi's system prompt
is not in the session file.
"""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.core.fs import split_lines
from forkpoint.export.chat import Conversation, assistant, flatten, tool, tool_call, user


def to_chat(data: bytes) -> Conversation:
    conversation = Conversation(notes=["system prompt not stored in Pi sessions"])
    for _number, _start, raw in split_lines(data):
        try:
            line = orjson.loads(raw) if raw.strip() else None
        except orjson.JSONDecodeError:
            continue
        if not isinstance(line, dict) or line.get("type") != "message" or not isinstance(line.get("message"), dict):
            continue
        message: dict[str, Any] = line["message"]
        role = message.get("role")
        if role == "user":
            conversation.messages.append(user(flatten(message.get("content"))))
        elif role == "toolResult":
            conversation.messages.append(tool(str(message.get("toolCallId", "")), flatten(message.get("content"))))
        elif role == "assistant":
            if isinstance(message.get("model"), str):
                conversation.model = message["model"]
            conversation.messages.append(_assistant(message.get("content")))
    return conversation


def _assistant(content: Any) -> dict[str, Any]:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content if isinstance(content, list) else [{"type": "text", "text": flatten(content)}]:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "thinking":
            reasoning.append(str(block.get("thinking", "")))
        elif block.get("type") == "toolCall":
            calls.append(tool_call(str(block.get("id", "")), str(block.get("name", "")), block.get("arguments") or {}))
    return assistant("\n".join(texts), "\n".join(reasoning), calls)
