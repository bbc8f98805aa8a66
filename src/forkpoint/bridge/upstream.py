"""Where the bridge sends a validated request: a pass-through (streamed) or a stub (answers itself).

forkpoint does not translate: each agent's own wire protocol goes to an upstream of the same protocol. Claude Code
speaks the Anthropic Messages API (``anthropic``), Codex the OpenAI Responses API (``openai-responses``), OpenCode,
Pi and the litellm-based Python agents OpenAI Chat Completions (``openai-chat``): the real APIs or a compatible
server such as ScriptedModel. The response is streamed back chunk by chunk, never buffered. ``StubUpstream``,
``ResponsesStubUpstream`` and ``ChatStubUpstream`` answer with a short final text.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import aiohttp
import orjson
from aiohttp import web

from forkpoint.model import JsonObject

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade",
})
# never copied from the agent's request: ours are set explicitly, the agent's key is a dummy
DROPPED_REQUEST_HEADERS = HOP_BY_HOP | {"host", "content-length", "x-api-key", "authorization", "cookie",
                                       "accept-encoding", "content-type"}
PASSED_RESPONSE_HEADERS = frozenset({"content-type", "content-encoding", "cache-control", "retry-after",
                                     "request-id", "x-request-id"})
STUB_TEXT = "forkpoint stub upstream: the resumed session was accepted."


@dataclass(frozen=True)
class Sent:
    """What an upstream did with one request: the HTTP status given to the agent and whether it left the bridge."""

    status: int
    forwarded: bool
    error: str | None = None


class Upstream(Protocol):
    name: str

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]: ...


def error_json(kind: str, message: str) -> JsonObject:
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_response(status: int, kind: str, message: str) -> web.Response:
    return web.json_response(error_json(kind, message), status=status)


REDACTED = b"[redacted by forkpoint]"


MIN_REDACTED_SECRET = 8


class Redactor:
    """Replaces the bridge's upstream key in a relayed byte stream, also across chunk boundaries.

    An upstream may echo the key it was sent (an error body such as ``invalid x-api-key: sk-...``); the agent would
    print it and write it into its session. Only a tail that could begin the key is held back until the next chunk,
    so a normal stream is passed on exactly as it arrives.
    """

    def __init__(self, secret: str) -> None:
        self.secret = secret.encode()
        self.pending = b""

    def feed(self, chunk: bytes) -> bytes:
        parts = (self.pending + chunk).split(self.secret)
        tail = parts[-1]  # raw bytes after the last whole key: only they can begin the next one
        held = self._held(tail)
        self.pending = tail[len(tail) - held:] if held else b""
        data = REDACTED.join(parts)
        return data[: len(data) - held]

    def _held(self, tail: bytes) -> int:
        """The length of the longest end of ``tail`` that begins the key (shorter than the key): only the places
        of the key's first byte are tried, not every length (a real key is ~100 bytes, a stream many chunks)."""
        start = max(0, len(tail) - len(self.secret) + 1)
        first = self.secret[:1]
        while (start := tail.find(first, start)) != -1:
            if self.secret.startswith(tail[start:]):
                return len(tail) - start
            start += 1
        return 0

    def flush(self) -> bytes:
        data, self.pending = self.pending, b""
        return data


async def relay(
    request: web.Request, upstream: aiohttp.ClientResponse, headers: dict[str, str], secret: str | None = None
) -> tuple[web.StreamResponse, Sent]:
    """Stream the upstream's answer to the agent chunk by chunk as it arrives: never buffered (``secret``, the
    upstream key, is redacted on the way)."""
    response = web.StreamResponse(status=upstream.status, headers=headers)
    await response.prepare(request)
    # A key under 8 characters ("x", "EMPTY": what local OpenAI-compatible servers are given) is no secret to
    # hide, and replacing it would corrupt the stream wherever those letters occur.
    redactor = Redactor(secret) if secret and len(secret) >= MIN_REDACTED_SECRET else None
    try:
        async for chunk in upstream.content.iter_any():
            out = redactor.feed(chunk) if redactor is not None else chunk
            if out:
                await response.write(out)
    except (aiohttp.ClientError, TimeoutError, OSError) as error:
        message = f"upstream stream broke: {type(error).__name__}: {error}"
        return response, Sent(upstream.status, True, message)
    if redactor is not None and redactor.pending:
        await response.write(redactor.flush())
    await response.write_eof()
    return response, Sent(upstream.status, True)


class AnthropicUpstream:
    """POST the cleaned body to ``<base_url>/v1/messages`` with the bridge's key; stream the answer back."""

    name = "anthropic"

    def __init__(self, base_url: str, api_key: str, *, connect_timeout_s: float = 30.0,
                 read_timeout_s: float = 600.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"upstream base URL must be http(s): {base_url!r}")
        if not api_key:
            raise ValueError("the anthropic upstream needs an API key")
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # never show the key
        return f"AnthropicUpstream({self.base_url!r})"

    async def open(self) -> None:
        self._session = aiohttp.ClientSession(timeout=self._timeout, auto_decompress=False, trust_env=False)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def headers_for(self, request: web.Request) -> dict[str, str]:
        listed = {token.strip().lower() for token in request.headers.get("connection", "").split(",")}
        headers = {
            name: value for name, value in request.headers.items()
            if name.lower() not in DROPPED_REQUEST_HEADERS and name.lower() not in listed
        }
        headers.update({"x-api-key": self._api_key, "content-type": "application/json",
                        "accept-encoding": "identity"})
        return headers

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]:
        assert self._session is not None, "upstream not opened"
        url = f"{self.base_url}/v1/messages"
        if request.query_string:
            url = f"{url}?{request.query_string}"
        try:
            upstream = await self._session.post(url, data=orjson.dumps(body), headers=self.headers_for(request),
                                                allow_redirects=False)
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            message = f"forkpoint bridge: upstream connection failed: {type(error).__name__}: {error}"
            return error_response(502, "api_error", message), Sent(502, False, message)
        async with upstream:
            headers = {name: value for name, value in upstream.headers.items()
                       if name.lower() in PASSED_RESPONSE_HEADERS or name.lower().startswith("anthropic-")}
            return await relay(request, upstream, headers, self._api_key)


class LocalStub:
    """Base of the stubs answering in the bridge itself: nothing to open, a counter for unique ids."""

    name = "stub"

    def __init__(self, text: str = STUB_TEXT) -> None:
        self.text = text
        self._count = 0

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None


class StubUpstream(LocalStub):
    """Answers a validated request itself with a short final text (SSE when ``stream`` is true); costs nothing."""

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]:
        self._count += 1
        message: JsonObject = {
            "id": f"msg_forkpoint_stub_{self._count:04d}", "type": "message", "role": "assistant",
            "model": body.get("model") if isinstance(body.get("model"), str) else "forkpoint-stub",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0},
        }
        if body.get("stream") is not True:
            full = {**message, "content": [{"type": "text", "text": self.text}], "stop_reason": "end_turn",
                    "usage": {**message["usage"], "output_tokens": 1}}
            return web.json_response(full), Sent(200, False)
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream",
                                                           "Cache-Control": "no-cache"})
        await response.prepare(request)
        for event, data in text_message_events(message, self.text):
            await response.write(f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode())
        await response.write_eof()
        return response, Sent(200, False)


def text_message_events(message: JsonObject, text: str) -> Iterator[tuple[str, JsonObject]]:
    """The Anthropic SSE event sequence for a message made of one text block."""
    yield "message_start", {"type": "message_start", "message": message}
    yield "content_block_start", {"type": "content_block_start", "index": 0,
                                  "content_block": {"type": "text", "text": ""}}
    yield "content_block_delta", {"type": "content_block_delta", "index": 0,
                                  "delta": {"type": "text_delta", "text": text}}
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                            "usage": {"output_tokens": 1}}
    yield "message_stop", {"type": "message_stop"}


# -- OpenAI Responses API (Codex) -------------------------------------------------------------------------------

#: credential-scoping headers of the agent's (dummy) identity: the upstream key's owner decides these
DROPPED_OPENAI_REQUEST_HEADERS = DROPPED_REQUEST_HEADERS | {"openai-organization", "openai-project",
                                                            "chatgpt-account-id"}
PASSED_OPENAI_RESPONSE_HEADERS = frozenset({"content-type", "content-encoding", "cache-control", "retry-after",
                                            "x-request-id", "request-id", "x-models-etag", "x-reasoning-included"})
PASSED_OPENAI_RESPONSE_PREFIXES = ("openai-", "x-ratelimit-", "x-codex-")


def openai_error_json(kind: str, message: str, code: str | None = None) -> JsonObject:
    """The OpenAI API error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def openai_error_response(status: int, kind: str, message: str, code: str | None = None) -> web.Response:
    return web.json_response(openai_error_json(kind, message, code), status=status)


class OpenAIUpstream:
    """POST the cleaned body to ``<base_url><endpoint>`` with the bridge's key; stream the answer back unbuffered.

    ``base_url`` is an OpenAI-style API root such as ``https://api.openai.com/v1`` or ScriptedModel's
    ``http://127.0.0.1:PORT/v1`` (a base already ending in the endpoint is used as is). Subclasses name the
    endpoint: ``/responses`` (Codex) or ``/chat/completions`` (OpenCode, Pi, litellm agents).
    """

    name = "openai"
    endpoint = "/responses"

    def __init__(self, base_url: str, api_key: str, *, connect_timeout_s: float = 30.0,
                 read_timeout_s: float = 600.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"upstream base URL must be http(s): {base_url!r}")
        if not api_key:
            raise ValueError(f"the {self.name} upstream needs an API key")
        base = base_url.rstrip("/")
        self.base_url = base
        self.url = base if base.endswith(self.endpoint) else f"{base}{self.endpoint}"
        self._api_key = api_key
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # never show the key
        return f"{type(self).__name__}({self.base_url!r})"

    async def open(self) -> None:
        self._session = aiohttp.ClientSession(timeout=self._timeout, auto_decompress=False, trust_env=False)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def headers_for(self, request: web.Request) -> dict[str, str]:
        """The agent's headers (``session-id``, ``originator``, ``x-codex-*``...) minus hop-by-hop, auth, host and
        length; then the bridge's key."""
        listed = {token.strip().lower() for token in request.headers.get("connection", "").split(",")}
        headers = {
            name: value for name, value in request.headers.items()
            if name.lower() not in DROPPED_OPENAI_REQUEST_HEADERS and name.lower() not in listed
        }
        headers.update({"authorization": f"Bearer {self._api_key}", "content-type": "application/json",
                        "accept-encoding": "identity"})
        return headers

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]:
        assert self._session is not None, "upstream not opened"
        url = self.url + (f"?{request.query_string}" if request.query_string else "")
        try:
            upstream = await self._session.post(url, data=orjson.dumps(body), headers=self.headers_for(request),
                                                allow_redirects=False)
        except (aiohttp.ClientError, TimeoutError, OSError) as error:
            message = f"forkpoint bridge: upstream connection failed: {type(error).__name__}: {error}"
            failed = openai_error_response(502, "server_error", message, "upstream_unreachable")
            return failed, Sent(502, False, message)
        async with upstream:
            headers = {name: value for name, value in upstream.headers.items()
                       if name.lower() in PASSED_OPENAI_RESPONSE_HEADERS
                       or name.lower().startswith(PASSED_OPENAI_RESPONSE_PREFIXES)}
            return await relay(request, upstream, headers, self._api_key)


class OpenAIResponsesUpstream(OpenAIUpstream):
    """The OpenAI Responses API (Codex)."""

    name = "openai-responses"
    endpoint = "/responses"


class OpenAIChatUpstream(OpenAIUpstream):
    """OpenAI Chat Completions (OpenCode's openai-compatible provider, Pi's openai-completions, litellm)."""

    name = "openai-chat"
    endpoint = "/chat/completions"


class ResponsesStubUpstream(LocalStub):
    """Answers a validated Responses request itself with one short assistant message (SSE when ``stream``)."""

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]:
        self._count += 1
        model = body.get("model") if isinstance(body.get("model"), str) else "forkpoint-stub"
        response_id = f"resp_forkpoint_stub_{self._count:04d}"
        item: JsonObject = {"type": "message", "id": f"msg_forkpoint_stub_{self._count:04d}", "status": "completed",
                            "role": "assistant",
                            "content": [{"type": "output_text", "text": self.text, "annotations": []}]}
        usage: JsonObject = {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 1,
                             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 1}
        envelope: JsonObject = {"id": response_id, "object": "response", "created_at": 0, "status": "in_progress",
                                "model": model, "output": [], "usage": None}
        if body.get("stream") is not True:
            return web.json_response({**envelope, "status": "completed", "output": [item], "usage": usage}), Sent(
                200, False)
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream",
                                                           "Cache-Control": "no-cache"})
        await response.prepare(request)
        for number, (event, data) in enumerate(responses_text_events(envelope, item, usage)):
            payload = {"type": event, "sequence_number": number, **data}
            await response.write(f"event: {event}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n".encode())
        await response.write_eof()
        return response, Sent(200, False)


def responses_text_events(envelope: JsonObject, item: JsonObject,
                          usage: JsonObject) -> Iterator[tuple[str, JsonObject]]:
    """The Responses SSE events (without ``type``/``sequence_number``) for a response of one assistant message."""
    text = item["content"][0]["text"]
    where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    yield "response.created", {"response": envelope}
    yield "response.output_item.added", {"output_index": 0, "item": {**item, "status": "in_progress", "content": []}}
    yield "response.output_text.delta", {**where, "delta": text}
    yield "response.output_item.done", {"output_index": 0, "item": item}
    yield "response.completed", {"response": {**envelope, "status": "completed", "output": [item], "usage": usage}}


# -- OpenAI Chat Completions (OpenCode, Pi, litellm agents) ---------------------------------------------------

class ChatStubUpstream(LocalStub):
    """Answers a validated Chat Completions request itself with one short assistant message (SSE when ``stream``)."""

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]:
        self._count += 1
        model = body.get("model") if isinstance(body.get("model"), str) else "forkpoint-stub"
        completion_id = f"chatcmpl-forkpoint-stub-{self._count:04d}"
        usage: JsonObject = {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1}
        message: JsonObject = {"role": "assistant", "content": self.text}
        if body.get("stream") is not True:
            return web.json_response({"id": completion_id, "object": "chat.completion", "created": 0, "model": model,
                                      "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                                      "usage": usage}), Sent(200, False)
        options = body.get("stream_options")
        chunks: list[JsonObject] = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {"content": self.text}, "finish_reason": None}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
        if isinstance(options, dict) and options.get("include_usage") is True:
            chunks.append({"choices": [], "usage": usage})
        response = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream",
                                                           "Cache-Control": "no-cache"})
        await response.prepare(request)
        for chunk in chunks:
            payload = {"id": completion_id, "object": "chat.completion.chunk", "created": 0, "model": model, **chunk}
            await response.write(f"data: {json.dumps(payload, ensure_ascii=False)}\n\n".encode())
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response, Sent(200, False)
