"""The translating upstream's pure core, bytes in and bytes out, for the bridge's I/O shell to drive.

Request side: ``prepare`` translates a validated agent body (its protocol's ``ProtocolSpec.chat``) into the Chat
body to POST and applies the sampling pins to it (pins land on the body that leaves the bridge). Answer side:
``AnswerStream`` takes the upstream's SSE bytes as they arrive and returns the agent's SSE bytes for them
(``feed``), then the rest at the end of the body (``close``); ``whole_answer`` does the same for a non-streamed
completion. The shell writes whatever comes back at once, so translation adds no buffering beyond what
``anthropic_answer`` and ``responses_answer`` describe (and, with the upstream ``key``, a tail that could begin
the key: ``bridge.secret``). An unreadable upstream stream, an error chunk or a failed finish
(``abort``) ends the answer with the protocol's failure event, and ``error`` says why once the body is closed (after
the first byte the run fails as retryable, like a broken pass-through stream).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from forkpoint.bridge.secret import UpstreamKey
from forkpoint.bridge.translate.chat_stream import MAX_EVENT_BYTES, SSEDecoder
from forkpoint.bridge.translate.common import DEFAULT_OPTIONS, ChatOptions, TranslationError, json_object, sse_event
from forkpoint.bridge.translate.sampling import Change, SamplingPins, apply_pins
from forkpoint.bridge.translate.usage import Usage
from forkpoint.core.model import JsonObject
from forkpoint.core.protocols import load

if TYPE_CHECKING:
    from collections.abc import Iterator

    from forkpoint.bridge.protocols.spec import ChatTranslation
    from forkpoint.bridge.translate.sequencer import BlockSequencer

NO_PINS = SamplingPins()


@dataclass(frozen=True)
class Prepared:
    """The Chat body to send and what the bridge records about it (``losses``, pin ``changes``)."""

    protocol: str
    agent_body: JsonObject
    body: JsonObject
    losses: tuple[str, ...]
    changes: tuple[Change, ...]
    custom_tools: frozenset[str] = field(default_factory=frozenset)

    @property
    def stream(self) -> bool:
        return self.body.get("stream") is True

    @property
    def model(self) -> str:
        return str(self.body["model"])

    @property
    def translation(self) -> ChatTranslation:
        return translation_of(self.protocol)


def translation_of(protocol: str) -> ChatTranslation:
    """The agent protocol's translation to Chat (its spec's ``chat``); a ``TranslationError`` when it has none."""
    chat = load(protocol).chat
    if chat is None:
        raise TranslationError(f"forkpoint has no translation of {protocol} to Chat Completions")
    return chat


def prepare(protocol: str, agent_body: JsonObject, pins: SamplingPins = NO_PINS, *, route: str = "",
            options: ChatOptions = DEFAULT_OPTIONS) -> Prepared:
    """Translate a validated agent body (in ``protocol``, a registered name; ``route``: the request's path under the
    bridge token, which some protocols read the model from) to Chat and pin it. Raises ``TranslationError``
    (refuse the request: it cannot be carried without silent loss) or ``sampling.UnsupportedPin``."""
    chat = translation_of(protocol)
    translated = chat.to_chat(chat.route(route, agent_body) if chat.route is not None else agent_body, options)
    custom: frozenset[str] = getattr(translated, "custom_tools", frozenset())
    body, changes = apply_pins(chat.target, translated.body, pins)
    return Prepared(protocol, agent_body, body, translated.losses, tuple(changes), custom)


class AnswerStream:
    """One streamed answer: upstream Chat SSE bytes -> the agent's SSE bytes."""

    def __init__(self, prepared: Prepared, *, answer_id: str, max_event_bytes: int = MAX_EVENT_BYTES,
                 key: UpstreamKey | None = None) -> None:
        self.decoder = SSEDecoder(max_event_bytes)
        self.translator: BlockSequencer = prepared.translation.stream(prepared, answer_id)
        if key:  # the upstream key never reaches the agent, even split across deltas (bridge.secret)
            self.translator.redact(key)
        self.error: str | None = None

    @property
    def usage(self) -> Usage:
        return self.translator.usage

    @property
    def losses(self) -> list[str]:
        return self.translator.losses

    @property
    def done(self) -> bool:
        return self.translator.done

    def feed(self, data: bytes) -> bytes:
        return b"".join(self.feed_parts(data))

    def close(self) -> bytes:
        """The upstream body ended: the last events (or the failure, if the answer never finished)."""
        return b"".join(self.close_parts())

    def feed_parts(self, data: bytes) -> Iterator[bytes]:
        """``feed`` one encoded event at a time: the closing events of a text each carry the whole text, so a huge
        answer encoded and joined at once cost ~10x its size (a 20 MB answer: ~200 MB)."""
        try:
            events = [event for payload in self.decoder.feed(data) if not self.translator.done
                      for event in self.translator.feed(payload)]
        except TranslationError as error:
            return self._abort(str(error))
        return (sse_event(name, event) for name, event in events)

    def close_parts(self) -> Iterator[bytes]:
        """``close`` one encoded event at a time (see ``feed_parts``)."""
        try:
            events = [event for payload in self.decoder.close() if not self.translator.done
                      for event in self.translator.feed(payload)]
            events += self.translator.end()
        except TranslationError as error:
            return self._abort(str(error))
        if self.translator.failure is not None:  # also a failure fed earlier (an error chunk, finish "abort")
            self.error = self.error or self.translator.failure
        return (sse_event(name, event) for name, event in events)

    def _abort(self, message: str) -> Iterator[bytes]:
        self.error = f"the model server's answer could not be translated: {message}"
        return iter([sse_event(name, event) for name, event in self.translator.abort(self.error)])


def whole_answer(prepared: Prepared, completion: bytes, *, answer_id: str) -> tuple[JsonObject, list[str]]:
    """A non-streamed Chat completion (the upstream's JSON body) -> the agent's JSON answer and its losses."""
    value = json_object(completion, "a completion")
    return prepared.translation.whole(value, prepared, answer_id)
