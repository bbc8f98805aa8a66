"""A Chat Completions answer -> the Anthropic Messages answer Claude Code expects, streamed as it arrives.

``ChatToAnthropicStream`` is fed each Chat chunk (a parsed ``data:`` object, or ``DONE``) and returns the
Anthropic SSE events it completes, in order: ``message_start`` on the first chunk, then content blocks
(``text_delta``, ``thinking_delta`` + an empty ``signature_delta``, ``input_json_delta``), ``message_delta``
(stop reason, usage) and ``message_stop`` once the server is done. Nothing is held back except tool-call
arguments of a call that arrives while an earlier call's arguments are still incomplete JSON (servers that
interleave parallel calls by index): Anthropic blocks never interleave, so such a call is streamed, in index
order, once the open one is complete, or at the finish. A server failure (an error chunk, ``finish_reason``
``abort``/``error``, the stream ending before a finish) becomes an Anthropic ``error`` event, which Claude Code
reports and retries.
"""

from __future__ import annotations

import json
from typing import Literal

from forkpoint.bridge.translate.common import TranslationError, only_choice, text_of
from forkpoint.bridge.translate.sequencer import FAILED_FINISH, BlockSequencer, Event, Kind, ToolCall
from forkpoint.bridge.translate.usage import Usage, from_chat, to_anthropic
from forkpoint.core.model import JsonObject

STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                "content_filter": "refusal"}


def stop_reason(finish: str, tool_calls: bool, losses: list[str]) -> str:
    """The Anthropic ``stop_reason`` for a Chat ``finish_reason`` (a server that says ``stop`` after tool calls,
    as older Ollama does, means ``tool_use``)."""
    if tool_calls and finish in ("stop", "tool_calls", "function_call"):
        return "tool_use"
    if finish not in STOP_REASONS:
        losses.append(f"finish_reason {finish!r} read as end_turn")
    return STOP_REASONS.get(finish, "end_turn")


class ChatToAnthropicStream(BlockSequencer):
    """One streamed answer's translation: ``feed`` each Chat chunk or ``DONE``, ``end`` when the body ends; each
    returns ``(event name, data)`` pairs to encode with ``common.sse_event``. ``losses`` lists what was lost."""

    def __init__(self, *, message_id: str, model: str, signature: str = "") -> None:
        super().__init__(id_prefix="toolu_fp_")
        self.message_id = message_id
        self.model = model
        self.signature = signature
        self._index = -1

    def begin(self) -> list[Event]:
        message: JsonObject = {"id": self.message_id, "type": "message", "role": "assistant", "model": self.model,
                               "content": [], "stop_reason": None, "stop_sequence": None,
                               "usage": to_anthropic(Usage())}
        return [("message_start", {"type": "message_start", "message": message})]

    def _start(self, block: JsonObject) -> Event:
        self._index += 1
        return "content_block_start", {"type": "content_block_start", "index": self._index, "content_block": block}

    def _delta(self, delta: JsonObject) -> Event:
        return "content_block_delta", {"type": "content_block_delta", "index": self._index, "delta": delta}

    def open_block(self, kind: Literal["text", "reasoning"]) -> list[Event]:
        block = {"type": "text", "text": ""} if kind == "text" else {"type": "thinking", "thinking": "",
                                                                      "signature": ""}
        return [self._start(block)]

    def block_delta(self, kind: Literal["text", "reasoning"], text: str) -> list[Event]:
        if kind == "text":
            return [self._delta({"type": "text_delta", "text": text})]
        return [self._delta({"type": "thinking_delta", "thinking": text})]

    def open_tool(self, tool: ToolCall) -> list[Event]:
        events = [self._start({"type": "tool_use", "id": tool.id, "name": tool.name, "input": {}})]
        if tool.arguments:
            events += self.tool_delta(tool, tool.text)
        return events

    def tool_delta(self, tool: ToolCall, text: str) -> list[Event]:
        return [self._delta({"type": "input_json_delta", "partial_json": text})]

    def close_block(self, kind: Kind, tool: ToolCall | None) -> list[Event]:
        events: list[Event] = []
        if kind == "reasoning":
            events.append(self._delta({"type": "signature_delta", "signature": self.signature}))
        if tool is not None and not tool.arguments:
            events += self.tool_delta(tool, "{}")
        return [*events, ("content_block_stop", {"type": "content_block_stop", "index": self._index})]

    def complete(self, finish: str) -> list[Event]:
        delta = {"stop_reason": stop_reason(finish, self.any_tool, self.losses), "stop_sequence": None}
        return [("message_delta", {"type": "message_delta", "delta": delta, "usage": to_anthropic(self.usage)}),
                ("message_stop", {"type": "message_stop"})]

    def fail(self, message: str) -> list[Event]:
        return [("error", {"type": "error", "error": {"type": "api_error", "message": message}})]


def chat_completion_to_anthropic(completion: JsonObject, *, message_id: str, model: str,
                                 signature: str = "") -> tuple[JsonObject, list[str]]:
    """A whole (non-streamed) Chat completion -> an Anthropic message, with what was lost."""
    losses: list[str] = []
    choice, message = only_choice(completion)
    content: list[JsonObject] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": signature})
    for name in ("content", "refusal"):
        if isinstance(message.get(name), str) and message[name]:
            content.append({"type": "text", "text": message[name]})
    calls = message.get("tool_calls") or []
    for number, call in enumerate(calls if isinstance(calls, list) else []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise TranslationError(f"tool_calls[{number}]: expected a function call")
        arguments = function.get("arguments") or "{}"
        try:
            parsed = json.loads(text_of(arguments, f"tool_calls[{number}].function.arguments"))
        except ValueError:
            losses.append(f"tool call {function.get('name')!r} arguments were not valid JSON: kept as a string")
            parsed = {"arguments": arguments}
        content.append({"type": "tool_use", "id": call.get("id") or f"toolu_fp_{number}",
                        "name": text_of(function.get("name"), f"tool_calls[{number}].function.name"),
                        "input": parsed})
    finish = choice.get("finish_reason")
    if isinstance(finish, str) and finish in FAILED_FINISH:
        raise TranslationError(f"the model server ended the answer with finish_reason {finish!r}")
    reason = stop_reason(finish if isinstance(finish, str) else "stop", bool(calls), losses)
    return {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": None,
            "usage": to_anthropic(from_chat(completion.get("usage")))}, losses
