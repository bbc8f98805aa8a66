"""Gemini CLI session JSONL -> OpenAI chat messages (for `forkpoint export`; pure).

Message records are folded as the CLI folds them (a repeated id replaces the earlier record; ``$set.messages``
replaces the list): ``user`` records become user messages (function responses become ``tool`` messages),
``gemini`` records assistant messages with their thoughts as reasoning and their ``toolCalls`` as tool calls.
The system instruction is not stored in Gemini CLI sessions.
"""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.core.fs import split_lines
from forkpoint.export.chat import Conversation, assistant, tool, tool_call, user


def to_chat(data: bytes) -> Conversation:
    conversation = Conversation(notes=["system instruction not stored in Gemini CLI sessions"])
    order: list[str] = []
    records: dict[str, dict[str, Any]] = {}
    for _number, _start, raw in split_lines(data):
        try:
            line = orjson.loads(raw) if raw.strip() else None
        except orjson.JSONDecodeError:
            continue
        if not isinstance(line, dict):
            continue
        update = line.get("$set")
        if isinstance(update, dict) and isinstance(update.get("messages"), list):
            order, records = [], {}
            for message in update["messages"]:
                _keep(message, order, records)
        elif isinstance(line.get("type"), str):
            _keep(line, order, records)
    for key in order:
        message = records[key]
        if message.get("type") == "user":
            _user(message.get("content"), conversation)
        elif message.get("type") == "gemini":
            if isinstance(message.get("model"), str):
                conversation.model = message["model"]
            listed = message.get("thoughts")
            thoughts = listed if isinstance(listed, list) else []
            calls = [tool_call(str(c.get("id", "")), str(c.get("name", "")), c.get("args") or {})
                     for c in message.get("toolCalls") or [] if isinstance(c, dict)]
            conversation.messages.append(assistant(
                _text(message.get("content")),
                "\n\n".join(str(t.get("description", "")) for t in thoughts if isinstance(t, dict)), calls))
    return conversation


def _keep(message: Any, order: list[str], records: dict[str, dict[str, Any]]) -> None:
    if isinstance(message, dict) and isinstance(message.get("id"), str):
        if message["id"] not in records:
            order.append(message["id"])
        records[message["id"]] = message


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(p.get("text")) for p in content or [] if isinstance(p, dict) and isinstance(p.get("text"), str))


def _user(content: Any, conversation: Conversation) -> None:
    parts = content if isinstance(content, list) else [{"text": content}]
    responses = [p["functionResponse"] for p in parts if isinstance(p, dict)
                 and isinstance(p.get("functionResponse"), dict)]
    for response in responses:
        conversation.messages.append(tool(str(response.get("id", "")),
                                          orjson.dumps(response.get("response")).decode()))
    text = _text(parts)
    if text or not responses:
        conversation.messages.append(user(text))
