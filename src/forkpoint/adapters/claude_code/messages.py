"""Claude Code session JSONL -> OpenAI chat messages (for `forkpoint export`; pure).

One model response is stored as several ``assistant`` lines sharing ``message.id`` (one per content block): they
become one assistant message. ``tool_result`` blocks become ``tool`` messages in file order; a user line's text
blocks a user message. Sidechain (sub-agent) lines, meta lines and attachments (system reminders Claude renders
into requests) are left out; Claude's system prompt is not in the session file.
"""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.core.fs import split_lines
from forkpoint.export.chat import Conversation, close, extend_assistant, flatten, tool, tool_call, user


def to_chat(data: bytes) -> Conversation:
    conversation = Conversation(notes=["system prompt not stored in Claude Code sessions", "attachments left out"])
    messages = conversation.messages
    for _number, _start, raw in split_lines(data):
        if not raw.strip():
            continue
        try:
            line = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(line, dict) or line.get("isSidechain") or line.get("isMeta"):
            continue
        message = line.get("message")
        if not isinstance(message, dict):
            continue
        if line.get("type") == "assistant":
            _assistant(messages, message, conversation)
        elif line.get("type") == "user":
            _user(messages, message.get("content"))
    return Conversation(close(messages), None, conversation.model, conversation.notes)


def _assistant(messages: list[dict[str, Any]], message: dict[str, Any], conversation: Conversation) -> None:
    if isinstance(message.get("model"), str) and message["model"] != "<synthetic>":
        conversation.model = message["model"]
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    content = message.get("content")
    for block in content if isinstance(content, list) else [{"type": "text", "text": flatten(content)}]:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            texts.append(str(block.get("text", "")))
        elif kind == "thinking":
            reasoning.append(str(block.get("thinking", "")))
        elif kind == "redacted_thinking":
            reasoning.append("[redacted_thinking]")
        elif kind in ("tool_use", "server_tool_use"):
            calls.append(tool_call(str(block.get("id", "")), str(block.get("name", "")), block.get("input") or {}))
    extend_assistant(messages, message.get("id"), "\n".join(texts), "\n".join(reasoning), calls)


def _user(messages: list[dict[str, Any]], content: Any) -> None:
    if not isinstance(content, list):
        messages.append(user(flatten(content)))
        return
    texts: list[str] = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            messages.append(tool(str(block.get("tool_use_id", "")), flatten(block.get("content"))))
        else:
            texts.append(flatten([block]))
    if texts:
        messages.append(user("\n".join(texts)))
