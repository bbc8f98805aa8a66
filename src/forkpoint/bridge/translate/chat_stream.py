"""Reading a streamed Chat Completions answer: SSE bytes -> chunks -> protocol-neutral pieces.

Servers differ in what a chunk holds, and this is where the differences end: reasoning arrives as
``reasoning_content`` (vLLM before 0.10, SGLang, DeepSeek, llama.cpp) or ``reasoning`` (vLLM 0.10+, OpenRouter,
Ollama); when a delta has both they are the same text and ``reasoning_content`` is taken. Tool-call arguments
arrive in pieces (vLLM, SGLang) or whole (Ollama, llama.cpp without streaming tool calls); the first delta of a
call carries ``id`` and ``function.name`` (a server that repeats them on every delta is tolerated; a missing id
is generated). Usage arrives in a last chunk with ``choices: []`` only when ``stream_options.include_usage`` was
asked (vLLM's ``continuous_usage_stats`` repeats it on every chunk: the last one counts). An ``{"error": ...}``
chunk mid-stream (vLLM, OpenRouter) ends the answer as failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from forkpoint.bridge.translate.common import DONE, Done, TranslationError, json_object
from forkpoint.bridge.translate.usage import Usage, from_chat
from forkpoint.core.model import JsonObject

#: one SSE event larger than this is refused (a hostile or broken upstream must not grow the bridge's memory)
MAX_EVENT_BYTES = 32 * 1024 * 1024


@dataclass(frozen=True)
class ContentDelta:
    """Answer text or reasoning text, as the model writes it."""

    kind: Literal["text", "reasoning"]
    text: str


@dataclass(frozen=True)
class ToolCallStarted:
    """A tool call's id and name, given once, before any of its arguments (``index``: the Chat call index)."""

    index: int
    id: str
    name: str


@dataclass(frozen=True)
class ToolCallArguments:
    """The next piece of a call's arguments: JSON text, complete only once every piece has arrived."""

    index: int
    text: str


@dataclass(frozen=True)
class Finished:
    """The choice's ``finish_reason`` as the server sent it; an ``{"error": ...}`` chunk reads as ``error`` with
    the server's message in ``failure``."""

    reason: str
    failure: str | None = None


@dataclass(frozen=True)
class UsageReported:
    """A usage chunk (a server that repeats usage on every chunk: the last one counts)."""

    usage: Usage


Piece = ContentDelta | ToolCallStarted | ToolCallArguments | Finished | UsageReported


@dataclass
class _Call:
    id: str | None = None
    name: str | None = None
    started: bool = False
    held: list[str] = field(default_factory=list)


class ChatStreamReader:
    """Turns Chat chunks into pieces in arrival order; tool-call ids and names are given once, before arguments."""

    def __init__(self, id_prefix: str = "call_fp_") -> None:
        self.id_prefix = id_prefix
        self.calls: dict[int, _Call] = {}
        self._last_index: int | None = None

    def feed(self, chunk: JsonObject) -> list[Piece]:
        if chunk.get("error") is not None:
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else error
            return [Finished("error", f"the model server reported an error mid-stream: {message}")]
        pieces: list[Piece] = []
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise TranslationError("chunk choices: expected a list")
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                raise TranslationError("chunk with a choice other than index 0 (n > 1 is never asked)")
            delta = choice.get("delta") or {}
            if not isinstance(delta, dict):
                raise TranslationError("chunk delta: expected an object")
            pieces.extend(self._delta(delta))
            reason = choice.get("finish_reason")
            if isinstance(reason, str) and reason:
                self._check_named()
                pieces.append(Finished(reason))
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            pieces.append(UsageReported(from_chat(usage)))
        return pieces

    def _delta(self, delta: JsonObject) -> list[Piece]:
        pieces: list[Piece] = []
        reasoning = delta.get("reasoning_content")
        if not (isinstance(reasoning, str) and reasoning):
            reasoning = delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            pieces.append(ContentDelta("reasoning", reasoning))
        for name in ("content", "refusal"):
            text = delta.get(name)
            if isinstance(text, str) and text:
                pieces.append(ContentDelta("text", text))
        if delta.get("function_call") is not None:
            raise TranslationError("legacy function_call deltas are not supported (tools are asked as tool_calls)")
        calls = delta.get("tool_calls")
        if calls is not None:
            if not isinstance(calls, list):
                raise TranslationError("delta tool_calls: expected a list")
            for call in calls:
                if not isinstance(call, dict):
                    raise TranslationError("delta tool_calls: expected objects")
                pieces.extend(self._call(call))
        return pieces

    def _call(self, call: JsonObject) -> list[Piece]:
        index = call.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            known = call.get("id") in {c.id for c in self.calls.values()}
            fresh = isinstance(call.get("id"), str) and not known
            index = (max(self.calls, default=-1) + 1) if fresh or self._last_index is None else self._last_index
        self._last_index = index
        state = self.calls.setdefault(index, _Call())
        function = call.get("function") or {}
        if not isinstance(function, dict):
            raise TranslationError("tool call function: expected an object")
        if isinstance(call.get("id"), str) and call["id"] and state.id is None:
            state.id = call["id"]
        name = function.get("name")
        if isinstance(name, str) and name and state.name is None:
            state.name = name
        arguments = function.get("arguments")
        pieces: list[Piece] = []
        if isinstance(arguments, str) and arguments:
            state.held.append(arguments)
        if state.name is not None:
            if not state.started:
                state.started = True
                pieces.append(ToolCallStarted(index, state.id or f"{self.id_prefix}{index}", state.name))
            if state.held:
                pieces.append(ToolCallArguments(index, "".join(state.held)))
                state.held.clear()
        return pieces

    def _check_named(self) -> None:
        for index, state in self.calls.items():
            if not state.started:
                raise TranslationError(f"tool call {index} ended without a function name")


class SSEDecoder:
    """Server-sent events (bytes in any split) -> the ``data`` payloads: parsed JSON objects or ``DONE``.

    Comments (``: keep-alive``, OpenRouter's ``: OPENROUTER PROCESSING``) and ``event:``/``id:`` lines are
    skipped; CRLF and LF line ends both work; an event's several ``data:`` lines are joined by newlines."""

    def __init__(self, max_event_bytes: int = MAX_EVENT_BYTES) -> None:
        self.max_event_bytes = max_event_bytes
        self._buffer = b""
        self._data: list[bytes] = []
        self._size = 0

    def feed(self, data: bytes) -> list[JsonObject | Done]:
        buffer = self._buffer + data
        out: list[JsonObject | Done] = []
        start = 0  # lines are cut by offset: a large chunk of many small events is read in one pass
        while (end := buffer.find(b"\n", start)) != -1:
            out.extend(self._line(buffer[start:end].rstrip(b"\r")))
            start = end + 1
        self._buffer = buffer[start:]
        if len(self._buffer) + self._size > self.max_event_bytes:
            raise TranslationError(f"an SSE event over {self.max_event_bytes} bytes")
        return out

    def close(self) -> list[JsonObject | Done]:
        """The end of the stream: a last event without its blank line still counts."""
        out = self._line(self._buffer.rstrip(b"\r")) if self._buffer else []
        self._buffer = b""
        return out + self._line(b"")

    def _line(self, line: bytes) -> list[JsonObject | Done]:
        if not line:
            return self._dispatch()
        if line.startswith(b"data:"):
            value = line[5:]
            value = value[1:] if value.startswith(b" ") else value
            self._data.append(value)
            self._size += len(value) + 1
            if self._size > self.max_event_bytes:
                raise TranslationError(f"an SSE event over {self.max_event_bytes} bytes")
        return []

    def _dispatch(self) -> list[JsonObject | Done]:
        if not self._data:
            return []
        payload = b"\n".join(self._data)
        self._data, self._size = [], 0
        if payload.strip() == DONE.encode():
            return [DONE]
        return [json_object(payload, "an SSE data payload")]
