"""The answer-side state machine both stream translators share: Chat pieces -> one output block at a time.

Anthropic content blocks and the Responses output items Codex reads are sequential: a block opens, gets its
deltas, closes, then the next one opens. Chat deltas are not: text, reasoning and several tool calls can
alternate, and some servers interleave the arguments of parallel calls by index. The sequencer streams every
piece as it arrives, closing the open block when another kind begins; only a tool call that starts while an
earlier call's arguments are incomplete JSON is held back, and it is streamed (in index order) as soon as the
open call is complete, or at the finish. A subclass turns the moments (open, delta, close, complete, fail) into
its protocol's events.

With ``redact`` set (the bridge's upstream key, ``bridge.secret``), pieces pass ``KeyedPieces`` first: the key is
replaced in every text, also when the server split it across deltas (a model writes it token by token).
"""

from __future__ import annotations

import dataclasses
import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Literal

from forkpoint.bridge.secret import HeldStream, UpstreamKey
from forkpoint.bridge.translate.chat_stream import (
    ChatStreamReader,
    ContentDelta,
    Finished,
    Piece,
    ToolCallArguments,
    ToolCallStarted,
    UsageReported,
)
from forkpoint.bridge.translate.common import DONE, Done, TranslationError
from forkpoint.bridge.translate.usage import Usage
from forkpoint.core.model import JsonObject

Event = tuple[str, JsonObject]
Kind = Literal["text", "reasoning", "tool"]
#: finish reasons that mean the server gave up (SGLang ``abort``; some proxies ``error``): a failed answer
FAILED_FINISH = frozenset({"abort", "error"})


def complete_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


@dataclass
class ToolCall:
    """A tool call as the sequencer knows it: ``arguments`` are the pieces received so far."""

    chat_index: int
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.arguments)


Channel = tuple[str, int | str]


class KeyedPieces:
    """Replaces the upstream key in pieces' text. Each channel (answer text, reasoning, one call's arguments) holds
    back only a tail that could begin the key; another piece (a new channel, a call's start, the finish) first
    releases what was held, so the order and the concatenated text are unchanged except for the key."""

    def __init__(self, key: UpstreamKey) -> None:
        self.key = key
        self._held: tuple[Channel, ContentDelta | ToolCallArguments, HeldStream[str]] | None = None

    def feed(self, piece: Piece) -> list[Piece]:
        if isinstance(piece, UsageReported):
            return [piece]
        if isinstance(piece, ContentDelta | ToolCallArguments):
            channel: Channel = ("text", piece.kind) if isinstance(piece, ContentDelta) else ("call", piece.index)
            out = [] if self._held is not None and self._held[0] == channel else self.flush()
            if self._held is None:
                stream = self.key.pieces()
                assert stream is not None, "KeyedPieces without a key"
                self._held = (channel, piece, stream)
            text = self._held[2].feed(piece.text)
            return out + ([dataclasses.replace(piece, text=text)] if text else [])
        out = self.flush()
        if isinstance(piece, ToolCallStarted):
            return [*out, dataclasses.replace(piece, id=self.key.text(piece.id), name=self.key.text(piece.name))]
        failure = piece.failure and self.key.text(piece.failure)
        return [*out, dataclasses.replace(piece, failure=failure)]

    def flush(self) -> list[Piece]:
        """The held tail of the open channel, as a piece of that channel (nothing when none is held)."""
        if self._held is None:
            return []
        _, piece, stream = self._held
        self._held = None
        text = stream.flush()
        return [dataclasses.replace(piece, text=text)] if text else []


class BlockSequencer(ABC):
    """Feed Chat chunks (or ``DONE``); get the protocol's events for them, in order, as soon as they are known."""

    def __init__(self, id_prefix: str) -> None:
        self.reader = ChatStreamReader(id_prefix=id_prefix)
        self.losses: list[str] = []
        self.started = False
        self.done = False
        #: why the answer failed (the message of its failure event), once it did
        self.failure: str | None = None
        self.usage = Usage()
        self.finish: str | None = None
        self.any_tool = False
        self._open: Kind | None = None
        self._tool: ToolCall | None = None
        self._queued: dict[int, ToolCall] = {}
        self._closed: set[int] = set()
        #: set by ``redact``: the key is replaced in every piece before it becomes an event
        self._keyed: KeyedPieces | None = None

    def redact(self, key: UpstreamKey) -> None:
        """Replace ``key`` in every text of the answer (nothing to do for an empty or short key)."""
        self._keyed = KeyedPieces(key) if key else None

    # -- the protocol's events ------------------------------------------------------------------------------

    @abstractmethod
    def begin(self) -> list[Event]: ...

    @abstractmethod
    def open_block(self, kind: Literal["text", "reasoning"]) -> list[Event]: ...

    @abstractmethod
    def block_delta(self, kind: Literal["text", "reasoning"], text: str) -> list[Event]: ...

    @abstractmethod
    def open_tool(self, tool: ToolCall) -> list[Event]:
        """A tool call's block opens; ``tool.arguments`` may already hold pieces (held back while queued)."""

    @abstractmethod
    def tool_delta(self, tool: ToolCall, text: str) -> list[Event]: ...

    @abstractmethod
    def close_block(self, kind: Kind, tool: ToolCall | None) -> list[Event]: ...

    @abstractmethod
    def complete(self, finish: str) -> list[Event]:
        """The answer is whole: ``finish`` is the Chat finish_reason, ``self.usage`` the last usage reported."""

    @abstractmethod
    def fail(self, message: str) -> list[Event]: ...

    # -- the state machine ----------------------------------------------------------------------------------

    def feed(self, chunk: JsonObject | Done) -> list[Event]:
        if self.done:
            raise TranslationError("a chunk after the answer ended")
        events = self._begin()
        if chunk == DONE:
            return events + self._released() + self._complete()
        assert isinstance(chunk, dict)
        pieces = self.reader.feed(chunk)
        if self._keyed is not None:
            pieces = [out for piece in pieces for out in self._keyed.feed(piece)]
        return events + self._pieces(pieces)

    def end(self) -> list[Event]:
        """The upstream's body ended (some servers send no ``[DONE]``): complete or fail the answer."""
        return [] if self.done else self._begin() + self._released() + self._complete()

    def _pieces(self, pieces: list[Piece]) -> list[Event]:
        events: list[Event] = []
        for piece in pieces:
            events.extend(self._piece(piece))
            if self.done:
                break
        return events

    def _released(self) -> list[Event]:
        """What the key redactor still holds (text that only looked like the key's start), before the end."""
        if self._keyed is None or self.done:
            return []
        return self._pieces(self._keyed.flush())

    def abort(self, message: str) -> list[Event]:
        """End the answer as failed now (an unreadable upstream stream): the events that say so, once."""
        if self._keyed is not None:
            message = self._keyed.key.text(message)
        return [] if self.done else self._begin() + self._fail(message)

    def _begin(self) -> list[Event]:
        if self.started:
            return []
        self.started = True
        return self.begin()

    def _piece(self, piece: Piece) -> list[Event]:
        if isinstance(piece, ContentDelta):
            events = [] if self._open == piece.kind else self._close() + self._opened(piece.kind)
            return events + self.block_delta(piece.kind, piece.text)
        if isinstance(piece, ToolCallStarted):
            self.any_tool = True
            self._queued[piece.index] = ToolCall(piece.index, piece.id, piece.name)
            return self._switch()
        if isinstance(piece, ToolCallArguments):
            return self._arguments(piece)
        if isinstance(piece, Finished):
            if piece.reason in FAILED_FINISH:
                return self._fail(piece.failure
                                  or f"the model server ended the answer with finish_reason {piece.reason!r}")
            events = self._close()
            while self._queued:
                events += self._open_tool(self._queued.pop(min(self._queued))) + self._close()
            self.finish = piece.reason
            return events
        self.usage = piece.usage
        return []

    def _opened(self, kind: Literal["text", "reasoning"]) -> list[Event]:
        self._open = kind
        return self.open_block(kind)

    def _arguments(self, piece: ToolCallArguments) -> list[Event]:
        if self._tool is not None and self._tool.chat_index == piece.index:
            self._tool.arguments.append(piece.text)
            return self.tool_delta(self._tool, piece.text)
        if piece.index in self._queued:
            self._queued[piece.index].arguments.append(piece.text)
            return self._switch()
        if piece.index in self._closed and not piece.text.strip():
            return []  # whitespace after a complete JSON value carries nothing
        raise TranslationError(f"arguments for tool call {piece.index} after its block was closed")

    def _switch(self) -> list[Event]:
        events: list[Event] = []
        while self._queued and (self._tool is None or complete_json(self._tool.text)):
            events += self._close() + self._open_tool(self._queued.pop(min(self._queued)))
        return events

    def _open_tool(self, tool: ToolCall) -> list[Event]:
        self._open, self._tool = "tool", tool
        return self.open_tool(tool)

    def _close(self) -> list[Event]:
        if self._open is None:
            return []
        kind, tool = self._open, self._tool
        self._open, self._tool = None, None
        if tool is not None:
            self._closed.add(tool.chat_index)
            if tool.arguments and not complete_json(tool.text):
                self.losses.append(f"tool call {tool.name!r} arguments were not valid JSON")
        return self.close_block(kind, tool)

    def _complete(self) -> list[Event]:
        if self.finish is None:
            return self._fail("the model server's stream ended before a finish_reason")
        self.done = True
        return self.complete(self.finish)

    def _fail(self, message: str) -> list[Event]:
        self.done = True
        self.failure = message
        return self.fail(message)
