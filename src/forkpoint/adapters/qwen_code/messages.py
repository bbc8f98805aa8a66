"""Qwen Code session JSONL -> OpenAI chat messages (for `forkpoint export`; pure).

``user`` records become user messages, ``assistant`` records assistant messages (thought parts as reasoning,
function calls as tool calls), ``tool_result`` records ``tool`` messages; ``system`` records are bookkeeping. The
system prompt is not stored in Qwen Code sessions.
"""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.core.fs import split_lines
from forkpoint.export.chat import Conversation, assistant, tool, tool_call, user


def to_chat(data: bytes) -> Conversation:
    conversation = Conversation(notes=["system prompt not stored in Qwen Code sessions"])
    for _number, _start, raw in split_lines(data):
        try:
            record = orjson.loads(raw) if raw.strip() else None
        except orjson.JSONDecodeError:
            continue
        message = record.get("message") if isinstance(record, dict) else None
        found = message.get("parts") if isinstance(message, dict) else None
        items: list[Any] = found if isinstance(found, list) else []
        kind = record.get("type") if isinstance(record, dict) else None
        if kind == "user":
            conversation.messages.append(user(_text(items)))
        elif kind == "assistant" and isinstance(record, dict):
            if isinstance(record.get("model"), str):
                conversation.model = record["model"]
            calls = [tool_call(str(p["functionCall"].get("id", "")), str(p["functionCall"].get("name", "")),
                               p["functionCall"].get("args") or {})
                     for p in items if isinstance(p, dict) and isinstance(p.get("functionCall"), dict)]
            reasoning = "\n\n".join(str(p["text"]) for p in items if isinstance(p, dict) and p.get("thought")
                                    and isinstance(p.get("text"), str))
            conversation.messages.append(assistant(_text(items), reasoning, calls))
        elif kind == "tool_result":
            for part in items:
                response = part.get("functionResponse") if isinstance(part, dict) else None
                if isinstance(response, dict):
                    conversation.messages.append(tool(str(response.get("id", "")),
                                                      orjson.dumps(response.get("response")).decode()))
    return conversation


def _text(items: list[Any]) -> str:
    return "".join(str(p["text"]) for p in items if isinstance(p, dict) and isinstance(p.get("text"), str)
                   and not p.get("thought"))
