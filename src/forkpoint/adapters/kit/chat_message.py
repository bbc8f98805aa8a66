"""The canonical form of one OpenAI Chat Completions message as litellm sends it (pure): what the chat gates of the
agents that talk Chat through litellm (OpenHands V0 and the V1 SDK) compare, and what their expected prefix holds;
and the tool calls of an assistant message as the other Chat gates (Pi, Qwen Code, Copilot CLI) compare them."""

from __future__ import annotations

from typing import Any

import orjson

from forkpoint.adapters.kit.jsondoc import as_object
from forkpoint.bridge.gate import Refusal
from forkpoint.bridge.protocols.openai_chat import parsed_arguments
from forkpoint.core.model import JsonObject


def project_text(content: Any) -> Any:
    """A message's content as one text; a list holding anything but text parts stays visible as itself."""
    if isinstance(content, list):
        parts = [p for p in content if isinstance(p, dict)]
        if any(p.get("type") != "text" for p in parts) or len(parts) != len(content):
            return {"non_text_parts": content}
        return "".join(str(p.get("text", "")) for p in parts)
    return content if isinstance(content, str) else ""


def project(message: Any) -> JsonObject:
    """The canonical form of one Chat Completions message (what the gate compares)."""
    if not isinstance(message, dict):
        return {"role": "?", "invalid": True}
    out: JsonObject = {"role": message.get("role"), "text": project_text(message.get("content"))}
    calls = message.get("tool_calls")
    if calls:
        out["tool_calls"] = [project_call(c) for c in calls] if isinstance(calls, list) else {"invalid": calls}
    for key in ("tool_call_id", "name"):
        if key in message:
            out[key] = message[key]
    return out


def project_call(call: Any) -> JsonObject:
    """One tool call: its arguments parsed (kept raw when they are not JSON)."""
    if not isinstance(call, dict):
        return {"invalid": call}
    function = as_object(call.get("function"))
    raw = function.get("arguments")
    try:
        arguments = orjson.loads(raw) if isinstance(raw, str) else raw
    except orjson.JSONDecodeError:
        arguments = {"_raw_arguments": raw}
    return {"id": call.get("id"), "type": call.get("type"), "name": function.get("name"), "arguments": arguments}


def wire_tool_calls(message: JsonObject, index: int) -> list[JsonObject]:
    """An assistant wire message's tool calls as the Chat gates of Pi, Qwen Code and Copilot CLI compare them (id,
    name, parsed arguments); a call that is not a function call is refused."""
    calls = []
    for call in message.get("tool_calls") or []:
        parsed = parsed_arguments(call)
        function = parsed.get("function") if isinstance(parsed, dict) else None
        if not isinstance(function, dict):
            raise Refusal(f"messages[{index}] has a tool call that is not a function call")
        calls.append({"id": parsed.get("id"), "name": function.get("name"), "arguments": function.get("arguments")})
    return calls
