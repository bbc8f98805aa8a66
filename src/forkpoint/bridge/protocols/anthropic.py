"""The Anthropic Messages API on the bridge: its pass-through upstream, its stub and its SSE encoding.

The encoding is shared with forkpoint.testing's ScriptedModel (one streamed answer = ``message_start``, per
content block ``content_block_start`` / deltas / ``content_block_stop``, ``message_delta``, ``message_stop``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from aiohttp import web

from forkpoint.bridge.protocols.spec import ChatTranslation, ProtocolSpec
from forkpoint.bridge.tool_schemas import from_anthropic
from forkpoint.bridge.translate.sampling import anthropic_pins
from forkpoint.bridge.upstream import (
    CHUNK,
    HttpUpstream,
    LocalStub,
    Sent,
    error_response,
    pieces,
    sse_event,
    stream_events,
)
from forkpoint.core.model import JsonObject
from forkpoint.core.protocols import wire

if TYPE_CHECKING:
    from forkpoint.bridge.protocols import Patience
    from forkpoint.bridge.translate.common import ChatOptions, Translated
    from forkpoint.bridge.translate.pipeline import Prepared
    from forkpoint.bridge.translate.sequencer import BlockSequencer

PROTOCOL = "anthropic-messages"


class AnthropicUpstream(HttpUpstream):
    """POST the cleaned body to ``<base_url>/v1/messages`` with the bridge's key; stream the answer back."""

    name = wire(PROTOCOL).upstream
    passed_response_headers: ClassVar[frozenset[str]] = frozenset({
        "content-type", "content-encoding", "cache-control", "retry-after", "request-id", "x-request-id"})
    passed_response_prefixes: ClassVar[tuple[str, ...]] = ("anthropic-",)

    def url_for(self, base: str) -> str:
        return f"{base}/v1/messages"

    def key_headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key}

    def error(self, status: int, message: str) -> web.Response:
        return error_response(status, "api_error", message)

    def refusal(self, status: int, message: str) -> web.Response:
        return error_response(status, "invalid_request_error", message)


def message_events(message: JsonObject, blocks: list[JsonObject], stop_reason: str, output_tokens: int,
                   chunk: int = CHUNK) -> Iterator[tuple[str, JsonObject]]:
    """The Anthropic streaming event sequence for one message of ``blocks`` (text, thinking, tool_use)."""
    yield "message_start", {"type": "message_start", "message": message}
    for index, block in enumerate(blocks):
        kind = block["type"]
        if kind == "text":
            start: JsonObject = {"type": "text", "text": ""}
            deltas: list[JsonObject] = [{"type": "text_delta", "text": c} for c in pieces(block["text"], chunk)]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": c} for c in pieces(block["thinking"], chunk)]
            deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
        elif kind == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": c}
                      for c in pieces(json.dumps(block["input"], ensure_ascii=False), chunk)]
        else:
            raise ValueError(f"unsupported scripted block type {kind!r}")
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
        for delta in deltas:
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                            "usage": {"output_tokens": output_tokens}}
    yield "message_stop", {"type": "message_stop"}


def encode(events: Iterable[tuple[str, JsonObject]]) -> list[bytes]:
    return [sse_event(event, data) for event, data in events]


class AnthropicStubUpstream(LocalStub):
    """Answers a validated request itself with a short final text (SSE when ``stream`` is true); costs nothing."""

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]:
        self._count += 1
        model: Any = body.get("model")
        message: JsonObject = {
            "id": f"msg_forkpoint_stub_{self._count:04d}", "type": "message", "role": "assistant",
            "model": model if isinstance(model, str) else "forkpoint-stub",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0},
        }
        if body.get("stream") is not True:
            full = {**message, "content": [{"type": "text", "text": self.text}], "stop_reason": "end_turn",
                    "usage": {**message["usage"], "output_tokens": 1}}
            return web.json_response(full), Sent(200, False)
        blocks: list[JsonObject] = [{"type": "text", "text": self.text}]
        events = message_events(message, blocks, "end_turn", 1, chunk=max(1, len(self.text)))
        return await stream_events(request, encode(events)), Sent(200, False)


def agent_error(status: int, message: str) -> web.Response:
    """An upstream failure as the Anthropic API reports it (Claude Code retries rate limits and overloads)."""
    kind = "rate_limit_error" if status == 429 else "overloaded_error" if status in (503, 529) else "api_error"
    return error_response(status, kind, message)


# the translators load only for a translating run
def _to_chat(body: JsonObject, options: ChatOptions) -> Translated:
    from forkpoint.bridge.translate.anthropic_chat import anthropic_to_chat

    return anthropic_to_chat(body, options)


def _stream(prepared: Prepared, answer_id: str) -> BlockSequencer:
    from forkpoint.bridge.translate.anthropic_answer import ChatToAnthropicStream

    return ChatToAnthropicStream(message_id=answer_id, model=prepared.model)


def _whole(completion: JsonObject, prepared: Prepared, answer_id: str) -> tuple[JsonObject, list[str]]:
    from forkpoint.bridge.translate.anthropic_answer import chat_completion_to_anthropic

    return chat_completion_to_anthropic(completion, message_id=answer_id, model=prepared.model)


def _passthrough(url: str, key: str, patience: Patience) -> AnthropicUpstream:
    return AnthropicUpstream(url, key, retry=patience.retry, **patience.options())


def _refusal(status: int, message: str) -> web.Response:
    """What Claude Code does not retry: an ``invalid_request_error``."""
    return error_response(status, "invalid_request_error", message)


SPEC = ProtocolSpec(
    name=PROTOCOL, passthrough=_passthrough, stub=AnthropicStubUpstream, encode=encode, pins=anthropic_pins,
    tool_schemas=from_anthropic, error=agent_error, refusal=_refusal,
    sample_request={"model": "claude-sonnet-4-5", "max_tokens": 64,
                    "messages": [{"role": "user", "content": "hello"}]},
    chat=ChatTranslation("openai-chat", _to_chat, _stream, _whole, "msg_forkpoint_"),
)
