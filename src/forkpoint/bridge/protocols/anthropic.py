"""The Anthropic Messages API on the bridge: its pass-through upstream, its stub and its SSE encoding.

The encoding is shared with forkpoint.testing's ScriptedModel (one streamed answer = ``message_start``, per
content block ``content_block_start`` / deltas / ``content_block_stop``, ``message_delta``, ``message_stop``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from aiohttp import web

from forkpoint.bridge.protocols.spec import ChatTranslation, ProtocolSpec
from forkpoint.bridge.subagents import Opening, SubagentWire, digest
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


#: the longest SSE line, and tool call input, the sub-agent reader keeps (a longer one is skipped: never granted)
MAX_LINE_BYTES = 1024 * 1024
REMINDER = "<system-reminder>"


class ToolPrompts:
    """Reads an Anthropic SSE answer as it streams (``SubagentWire.reader``): the prompt input of each complete
    ``tool_use`` block named in ``tools``, told to ``found`` at the block's ``content_block_stop``. Holds at most
    one line and one block's input (``MAX_LINE_BYTES`` each)."""

    def __init__(self, tools: Mapping[str, str], found: Callable[[str], None] | None = None) -> None:
        self.tools = tools
        self.found = found
        self.prompts: list[str] = []
        self._line = bytearray()
        self._skipping = False  # inside a line longer than the cap
        self._blocks: dict[int, tuple[str, list[str], int]] = {}  # index -> (input field, JSON pieces, size)

    def feed(self, chunk: bytes) -> None:
        if (not self._blocks and not self._line and not self._skipping and chunk.endswith(b"\n")
                and b'"tool_use"' not in chunk):
            return  # whole lines, none able to open a watched block, none open: nothing to keep (most chunks)
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            self._take(chunk[start:end])
            if not self._skipping:
                self._event(bytes(self._line))
            self._line.clear()
            self._skipping = False
            start = end + 1
        self._take(chunk[start:])

    def _take(self, piece: bytes) -> None:
        if self._skipping or len(self._line) + len(piece) > MAX_LINE_BYTES:
            self._skipping = True
            self._line.clear()
        else:
            self._line += piece

    def _event(self, line: bytes) -> None:
        # every event of every streamed answer passes here: parse only what can open or continue a watched block
        # (a tool_use start, or any event while one is open), not each text delta
        if not line.startswith(b"data:") or (not self._blocks and b'"tool_use"' not in line):
            return
        try:
            data = json.loads(line[5:])
        except ValueError:
            return
        if not isinstance(data, dict) or not isinstance(data.get("index"), int):
            return
        index, kind = data["index"], data.get("type")
        if kind == "content_block_start":
            block = data.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") in self.tools:
                self._blocks[index] = (self.tools[block["name"]], [], 0)
        elif kind == "content_block_delta" and index in self._blocks:
            delta = data.get("delta")
            piece = delta.get("partial_json") if isinstance(delta, dict) else None
            name, pieces_, size = self._blocks[index]
            if not isinstance(piece, str) or size + len(piece) > MAX_LINE_BYTES:
                del self._blocks[index]  # not an input this reader can vouch for: never granted
                return
            pieces_.append(piece)
            self._blocks[index] = (name, pieces_, size + len(piece))
        elif kind == "content_block_stop" and index in self._blocks:
            name, pieces_, _ = self._blocks.pop(index)
            try:
                arguments = json.loads("".join(pieces_))
            except ValueError:
                return
            prompt = arguments.get(name) if isinstance(arguments, dict) else None
            if isinstance(prompt, str) and prompt:
                self.prompts.append(prompt)
                if self.found is not None:
                    self.found(prompt)


def _project(message: JsonObject) -> JsonObject:
    """A message as the sub-conversation check compares it: string content as one text block, cache markers
    (which Claude Code moves to the newest message on every request) left out."""
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
    if not isinstance(blocks, list):
        raise ValueError("a message without content")
    return {"role": message.get("role"),
            "content": [{k: v for k, v in b.items() if k != "cache_control"} if isinstance(b, dict) else b
                        for b in blocks]}


def opening(body: Any) -> Opening:
    """The sub-conversation a request carries: its first user message must be the prompt as its last text block,
    after nothing but ``<system-reminder>`` text blocks (what Claude Code puts in front, measured on 2.1.220 and
    2.1.332)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ValueError("no list of message objects")
    digests = tuple(digest(_project(message)) for message in messages)
    answered = any(message.get("role") == "assistant" for message in messages)
    first = _project(messages[0])["content"]
    texts: list[str] = [b["text"] for b in first
                        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)]
    if (messages[0].get("role") != "user" or not first or len(texts) != len(first)
            or not all(t.startswith(REMINDER) for t in texts[:-1])):
        return Opening(None, answered, digests)
    return Opening(texts[-1], answered, digests)


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
    subagents=SubagentWire(ToolPrompts, opening),
)
