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
from dataclasses import dataclass, field
from typing import Any

from forkpoint.bridge.translate.chat_stream import (
    ChatStreamReader,
    Finished,
    Piece,
    ReasoningDelta,
    TextDelta,
    ToolCallArguments,
    ToolCallStarted,
    UsageReported,
)
from forkpoint.bridge.translate.common import DONE, Done, JsonObject, TranslationError, text_of
from forkpoint.bridge.translate.usage import Usage, from_chat, to_anthropic

Event = tuple[str, JsonObject]
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use", "function_call": "tool_use",
                "content_filter": "refusal"}
FAILED_FINISH = frozenset({"abort", "error"})


def stop_reason(finish: str, tool_calls: bool, losses: list[str]) -> str:
    """The Anthropic ``stop_reason`` for a Chat ``finish_reason`` (a server that says ``stop`` after tool calls,
    as older Ollama does, means ``tool_use``)."""
    if tool_calls and finish in ("stop", "tool_calls", "function_call"):
        return "tool_use"
    if finish not in STOP_REASONS:
        losses.append(f"finish_reason {finish!r} read as end_turn")
    return STOP_REASONS.get(finish, "end_turn")


def _complete_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@dataclass
class _Tool:
    chat_index: int
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)


class ChatToAnthropicStream:
    """One streamed answer's translation state. ``losses`` lists what could not be carried."""

    def __init__(self, *, message_id: str, model: str, signature: str = "") -> None:
        self.message_id = message_id
        self.model = model
        self.signature = signature
        self.losses: list[str] = []
        self.reader = ChatStreamReader(id_prefix="toolu_fp_")
        self.started = False
        self.done = False
        self.usage = Usage()
        self.stop: str | None = None
        self._next = 0
        self._open: tuple[str, int] | None = None  # (kind, anthropic index)
        self._tool: _Tool | None = None  # the open tool block
        self._queued: dict[int, _Tool] = {}
        self._closed: set[int] = set()
        self._any_tool = False

    def feed(self, chunk: JsonObject | Done) -> list[Event]:
        if self.done:
            raise TranslationError("a chunk after the answer ended")
        events = self._start()
        if chunk == DONE:
            return events + self._finish()
        assert isinstance(chunk, dict)
        for piece in self.reader.feed(chunk):
            events.extend(self._piece(piece))
            if self.done:
                break
        return events

    def end(self) -> list[Event]:
        """The upstream's body ended (without ``[DONE]``, some servers): finish or fail the answer."""
        return [] if self.done else self._start() + self._finish()

    def _start(self) -> list[Event]:
        if self.started:
            return []
        self.started = True
        message: JsonObject = {"id": self.message_id, "type": "message", "role": "assistant", "model": self.model,
                   "content": [], "stop_reason": None, "stop_sequence": None, "usage": to_anthropic(Usage())}
        return [("message_start", {"type": "message_start", "message": message})]

    def _piece(self, piece: Piece) -> list[Event]:
        if isinstance(piece, TextDelta):
            return [*self._open_block("text"), self._delta({"type": "text_delta", "text": piece.text})]
        if isinstance(piece, ReasoningDelta):
            return [*self._open_block("thinking"), self._delta({"type": "thinking_delta", "thinking": piece.text})]
        if isinstance(piece, ToolCallStarted):
            self._any_tool = True
            self._queued[piece.index] = _Tool(piece.index, piece.id, piece.name)
            return self._switch()
        if isinstance(piece, ToolCallArguments):
            return self._arguments(piece)
        if isinstance(piece, Finished):
            if piece.reason in FAILED_FINISH:
                return self._fail(f"the model server ended the answer with finish_reason {piece.reason!r}")
            events = self._close() + self._flush_queued()
            self.stop = stop_reason(piece.reason, self._any_tool, self.losses)
            return events
        if isinstance(piece, UsageReported):
            self.usage = piece.usage
            return []
        return self._fail(piece.message)

    def _arguments(self, piece: ToolCallArguments) -> list[Event]:
        if self._tool is not None and self._tool.chat_index == piece.index:
            self._tool.arguments.append(piece.text)
            return [self._delta({"type": "input_json_delta", "partial_json": piece.text})]
        if piece.index in self._queued:
            self._queued[piece.index].arguments.append(piece.text)
            return self._switch()
        if piece.index in self._closed and not piece.text.strip():
            return []  # whitespace after a complete JSON value carries nothing
        raise TranslationError(f"arguments for tool call {piece.index} after its block was closed")

    def _switch(self) -> list[Event]:
        """Open queued calls in index order while the open block may close (it is not a tool call whose
        arguments are still incomplete JSON): the blocks keep the server's call order."""
        events: list[Event] = []
        while self._queued and (self._tool is None or _complete_json("".join(self._tool.arguments))):
            events += self._close() + self._open_tool(self._queued.pop(min(self._queued)))
        return events

    def _open_tool(self, tool: _Tool) -> list[Event]:
        index = self._begin("tool_use")
        self._tool = tool
        events: list[Event] = [("content_block_start", {
            "type": "content_block_start", "index": index,
            "content_block": {"type": "tool_use", "id": tool.id, "name": tool.name, "input": {}}})]
        if tool.arguments:
            events.append(self._delta({"type": "input_json_delta", "partial_json": "".join(tool.arguments)}))
        return events

    def _flush_queued(self) -> list[Event]:
        events: list[Event] = []
        for index in sorted(self._queued):
            events += self._open_tool(self._queued.pop(index)) + self._close()
        return events

    def _begin(self, kind: str) -> int:
        index = self._next
        self._next += 1
        self._open = (kind, index)
        return index

    def _open_block(self, kind: str) -> list[Event]:
        if self._open is not None and self._open[0] == kind:
            return []
        events = self._close()
        index = self._begin(kind)
        block: JsonObject = {"type": "text", "text": ""} if kind == "text" else {
            "type": "thinking", "thinking": "", "signature": ""}
        return [*events, ("content_block_start", {"type": "content_block_start", "index": index,
                                                   "content_block": block})]

    def _delta(self, delta: JsonObject) -> Event:
        assert self._open is not None
        return "content_block_delta", {"type": "content_block_delta", "index": self._open[1], "delta": delta}

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        kind, index = self._open
        events: list[Event] = []
        if kind == "thinking":
            events.append(self._delta({"type": "signature_delta", "signature": self.signature}))
        if self._tool is not None:
            arguments = "".join(self._tool.arguments)
            if not arguments:
                events.append(self._delta({"type": "input_json_delta", "partial_json": "{}"}))
            elif not _complete_json(arguments):
                self.losses.append(f"tool call {self._tool.name!r} arguments were not valid JSON")
            self._closed.add(self._tool.chat_index)
            self._tool = None
        self._open = None
        return [*events, ("content_block_stop", {"type": "content_block_stop", "index": index})]

    def _finish(self) -> list[Event]:
        if self.stop is None:
            return self._fail("the model server's stream ended before a finish_reason")
        self.done = True
        usage = to_anthropic(self.usage)
        return [("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": self.stop, "stop_sequence": None}, "usage": usage}),
                ("message_stop", {"type": "message_stop"})]

    def _fail(self, message: str) -> list[Event]:
        self.done = True
        return [("error", {"type": "error", "error": {"type": "api_error", "message": message}})]


def chat_completion_to_anthropic(completion: JsonObject, *, message_id: str, model: str,
                                 signature: str = "") -> tuple[JsonObject, list[str]]:
    """A whole (non-streamed) Chat completion -> an Anthropic message, with what was lost."""
    losses: list[str] = []
    choices = completion.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise TranslationError("a completion without exactly one choice")
    message: Any = choices[0].get("message")
    if not isinstance(message, dict):
        raise TranslationError("a completion choice without a message")
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
    finish = choices[0].get("finish_reason")
    if isinstance(finish, str) and finish in FAILED_FINISH:
        raise TranslationError(f"the model server ended the answer with finish_reason {finish!r}")
    reason = stop_reason(finish if isinstance(finish, str) else "stop", bool(calls), losses)
    return {"id": message_id, "type": "message", "role": "assistant", "model": model, "content": content,
            "stop_reason": reason, "stop_sequence": None,
            "usage": to_anthropic(from_chat(completion.get("usage")))}, losses
