"""The neutral conversation every exporter writes: OpenAI Chat Completions messages, built by each agent's converter.

A message is a plain dict in the OpenAI chat shape (``role``, ``content`` as a string, ``tool_calls`` with string
``arguments``, ``tool_call_id``), plus ``reasoning_content`` on assistant turns that had reasoning (the field vLLM,
SGLang and the Hugging Face chat templates use), so reasoning is kept apart instead of dropped. Content that is not
text (images, documents) becomes a placeholder naming its type: the export is a text corpus and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

ChatMessage = dict[str, Any]


@dataclass
class Conversation:
    """What a converter read from one native session file.

    ``tools`` are tool definitions in OpenAI function form when the native file itself holds them (OpenHands'
    system event does); ``model`` is the model named in the file, if any; ``notes`` say what was left out.
    """

    messages: list[ChatMessage] = field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    model: str | None = None
    notes: list[str] = field(default_factory=list)


def system(text: str) -> ChatMessage:
    return {"role": "system", "content": text}


def user(text: str) -> ChatMessage:
    return {"role": "user", "content": text}


def assistant(text: str, reasoning: str = "", tool_calls: list[dict[str, Any]] | None = None) -> ChatMessage:
    message: ChatMessage = {"role": "assistant", "content": text}
    if reasoning:
        message["reasoning_content"] = reasoning
    if tool_calls:
        message["tool_calls"] = tool_calls
    return message


def tool_call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    """One call; ``arguments`` as the model sent them (a JSON string) or as an object (serialised here).

    A free-form input that is not a JSON object (Codex's custom ``apply_patch`` tool) is wrapped as
    ``{"input": TEXT}`` so every exported call has JSON-object arguments.
    """
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError:
            parsed = None
        text = arguments if isinstance(parsed, dict) else json.dumps({"input": arguments}, ensure_ascii=False)
    else:
        text = json.dumps(arguments if isinstance(arguments, dict) else {"input": arguments}, ensure_ascii=False)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def tool(call_id: str, text: str) -> ChatMessage:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def flatten(content: Any) -> str:
    """Native content (a string, or a list of typed blocks) as text; non-text blocks become ``[type]``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict):
        return flatten([content])
    if not isinstance(content, list):
        return json.dumps(content, ensure_ascii=False)
    parts: list[str] = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            text = block.get("text")
            if isinstance(text, str):
                parts.append(text)
            else:
                parts.append(f"[{block.get('type', 'block')}]")
    return "\n".join(parts)


def extend_assistant(
    messages: list[ChatMessage], key: object, text: str, reasoning: str = "", calls: list[dict[str, Any]] | None = None
) -> None:
    """Add one native record of a model response: merged into the trailing assistant message when it belongs to
    the same response (``key``, e.g. Claude's message id; None never merges), else a new assistant message."""
    last = messages[-1] if messages else None
    if key is not None and last is not None and last["role"] == "assistant" and last.get("_key") == key:
        if text:
            last["content"] = f"{last['content']}\n{text}" if last["content"] else text
        if reasoning:
            previous = last.get("reasoning_content", "")
            last["reasoning_content"] = f"{previous}\n{reasoning}" if previous else reasoning
        if calls:
            last.setdefault("tool_calls", []).extend(calls)
        return
    message = assistant(text, reasoning, calls)
    message["_key"] = key
    messages.append(message)


def close(messages: list[ChatMessage]) -> list[ChatMessage]:
    """Drop the converters' bookkeeping keys."""
    for message in messages:
        message.pop("_key", None)
    return messages


def from_chat_rows(rows: Any) -> Conversation:
    """A conversation from native rows that are already chat messages (mini-swe-agent's ``messages``, SWE-agent's
    ``history``): each copied with its chat fields only; anything but a list gives an empty conversation."""
    conversation = Conversation()
    for message in rows if isinstance(rows, list) else []:
        converted = chat_message(message, conversation)
        if converted is not None:
            conversation.messages.append(converted)
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
