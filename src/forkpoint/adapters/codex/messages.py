"""Codex rollout JSONL -> OpenAI chat messages (for `forkpoint export`; pure).

The model's view is the rollout's ``response_item`` lines: ``message`` items (``developer`` becomes ``system``,
as chat templates know no developer role), ``reasoning`` (summary and reasoning text; encrypted content cannot be
read and is noted), ``function_call`` / ``custom_tool_call`` (a free-form ``apply_patch`` input becomes
``{"input": TEXT}``) and their outputs. Consecutive model items form one assistant message. The base instructions
of ``session_meta`` are the system prompt.
"""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.core.fs import split_lines
from forkpoint.export.chat import Conversation, close, extend_assistant, flatten, system, tool, tool_call, user

_CALLS = ("function_call", "custom_tool_call", "local_shell_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")


def to_chat(data: bytes) -> Conversation:
    conversation = Conversation()
    messages = conversation.messages
    turn = 0  # a new key whenever a non-model item interrupts, so model items merge only when adjacent
    for _number, _start, raw in split_lines(data):
        try:
            line = orjson.loads(raw) if raw.strip() else None
        except orjson.JSONDecodeError:
            continue
        if not isinstance(line, dict) or not isinstance(line.get("payload"), dict):
            continue
        payload: dict[str, Any] = line["payload"]
        if line.get("type") == "session_meta":
            instructions = payload.get("base_instructions")
            text = instructions.get("text") if isinstance(instructions, dict) else instructions
            if isinstance(text, str) and text:
                messages.append(system(text))
            continue
        if line.get("type") == "turn_context" and isinstance(payload.get("model"), str):
            conversation.model = payload["model"]
        if line.get("type") != "response_item":
            continue
        kind = payload.get("type")
        if kind == "message":
            role = payload.get("role")
            text = flatten(payload.get("content"))
            if role == "assistant":
                extend_assistant(messages, turn, text)
                continue
            messages.append(system(text) if role in ("developer", "system") else user(text))
        elif kind == "reasoning":
            extend_assistant(messages, turn, "", _reasoning(payload, conversation))
            continue
        elif kind in _CALLS:
            arguments = payload.get("arguments", payload.get("input", payload.get("action", {})))
            name = str(payload.get("name", "local_shell" if kind == "local_shell_call" else ""))
            extend_assistant(messages, turn, "", "", [tool_call(str(payload.get("call_id", "")), name, arguments)])
            continue
        elif kind in _OUTPUTS:
            output = payload.get("output")
            if isinstance(output, dict):
                output = output.get("content", output)
            messages.append(tool(str(payload.get("call_id", "")), flatten(output)))
        else:
            conversation.notes.append(f"response item {kind!r} left out")
        turn += 1
    return Conversation(close(messages), None, conversation.model, conversation.notes)


def _reasoning(payload: dict[str, Any], conversation: Conversation) -> str:
    parts = [flatten(payload.get("summary")), flatten(payload.get("content"))]
    if payload.get("encrypted_content") and not any(parts):
        note = "encrypted reasoning cannot be exported"
        if note not in conversation.notes:
            conversation.notes.append(note)
    return "\n".join(part for part in parts if part)
