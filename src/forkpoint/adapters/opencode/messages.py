"""OpenCode session export JSON -> OpenAI chat messages (for `forkpoint export`; pure).

An assistant message of OpenCode holds several model steps (``step-start`` ... ``step-finish`` parts): each step
becomes one assistant message (its text, reasoning and tool parts) followed by one ``tool`` message per tool part
(the output, or the error of a failed call). User messages are their non-synthetic text parts. OpenCode's system
prompt is not in the export.
"""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.export.chat import Conversation, assistant, flatten, tool, tool_call, user


def to_chat(data: bytes) -> Conversation:
    document = orjson.loads(data)
    conversation = Conversation(notes=["system prompt not stored in OpenCode exports"])
    rows = document.get("messages") if isinstance(document, dict) else None
    for row in rows if isinstance(rows, list) else []:
        info = row.get("info") if isinstance(row, dict) else None
        parts = row.get("parts") if isinstance(row, dict) else None
        if not isinstance(info, dict) or not isinstance(parts, list):
            continue
        if info.get("role") == "user":
            texts = [str(p.get("text", "")) for p in parts
                     if isinstance(p, dict) and p.get("type") == "text" and not p.get("synthetic")]
            conversation.messages.append(user("\n".join(texts)))
        elif info.get("role") == "assistant":
            if isinstance(info.get("modelID"), str):
                conversation.model = info["modelID"]
            for step in _steps(parts):
                conversation.messages.extend(_step(step))
    return conversation


def _steps(parts: list[Any]) -> list[list[dict[str, Any]]]:
    steps: list[list[dict[str, Any]]] = []
    for part in parts:
        if not isinstance(part, dict):
            continue
        if part.get("type") == "step-start" or not steps:
            steps.append([])
        steps[-1].append(part)
    return [step for step in steps if any(p.get("type") in ("text", "reasoning", "tool") for p in step)]


def _step(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    texts = [str(p.get("text", "")) for p in parts if p.get("type") == "text"]
    reasoning = [str(p.get("text", "")) for p in parts if p.get("type") == "reasoning"]
    calls: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for part in parts:
        if part.get("type") != "tool":
            continue
        state: dict[str, Any] = part["state"] if isinstance(part.get("state"), dict) else {}
        call_id = str(part.get("callID", ""))
        calls.append(tool_call(call_id, str(part.get("tool", "")), state.get("input") or {}))
        if state.get("status") == "completed":
            results.append(tool(call_id, flatten(state.get("output"))))
        elif state.get("status") == "error":
            results.append(tool(call_id, flatten(state.get("error"))))
    return [assistant("\n".join(texts), "\n".join(reasoning), calls), *results]
