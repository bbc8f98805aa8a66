"""Where the bridge sends a validated request: the protocol-independent half (pure HTTP relaying, no agent).

forkpoint does not translate yet: each agent's own wire protocol goes to an upstream of the same protocol (see
``bridge.protocols``: one module per protocol with its upstream, its stub and its SSE encoding, and the registry
``make_upstream``). Here: the ``Upstream`` interface, the streamed relay (never buffered; the upstream key
redacted on the way), the HTTP pass-through base every protocol's upstream specialises, and the local stub base.
A future translating upstream is one more ``Upstream``: it receives the validated body and answers the agent in
the agent's protocol; ``Sent.usage`` is where it (or a pass-through) reports what one request used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar, Protocol

import aiohttp
import orjson
from aiohttp import web

from forkpoint.bridge.usage_tap import UsageTap
from forkpoint.model import JsonObject

HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade",
})
# never copied from the agent's request: ours are set explicitly, the agent's key is a dummy
DROPPED_REQUEST_HEADERS = HOP_BY_HOP | {"host", "content-length", "x-api-key", "authorization", "cookie",
                                       "accept-encoding", "content-type"}
STUB_TEXT = "forkpoint stub upstream: the resumed session was accepted."
SSE_HEADERS = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
CHUNK = 48  # characters per streamed delta


@dataclass(frozen=True)
class Sent:
    """What an upstream did with one request: the HTTP status given to the agent, whether it left the bridge, and
    (when the upstream reports it) what the request used, e.g. token counts."""

    status: int
    forwarded: bool
    error: str | None = None
    usage: JsonObject | None = None
    #: facts for the request's record (e.g. a translation's losses: names, never content)
    facts: JsonObject | None = None


class UpstreamRefusal(Exception):
    """Raised by ``Upstream.send`` before anything left the bridge: the request cannot be carried (e.g. a body the
    translator cannot translate without silent loss); the bridge records and answers it as a refusal."""


class Upstream(Protocol):
    name: str

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]: ...


def error_json(kind: str, message: str) -> JsonObject:
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_response(status: int, kind: str, message: str) -> web.Response:
    return web.json_response(error_json(kind, message), status=status)


def sse_event(event: str | None, data: JsonObject | str) -> bytes:
    """One server-sent event: ``event:`` line (when named) and one ``data:`` line (a str is sent verbatim)."""
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return (f"event: {event}\n" if event else "").encode() + f"data: {text}\n\n".encode()


def pieces(value: str, size: int = CHUNK) -> list[str]:
    """``value`` in streamed pieces (at least one, possibly empty)."""
    return [value[i:i + size] for i in range(0, len(value), size)] or [""]


async def stream_events(request: web.Request, events: list[bytes]) -> web.StreamResponse:
    """Answer with an SSE stream of already encoded events."""
    response = web.StreamResponse(status=200, headers=SSE_HEADERS)
    await response.prepare(request)
    for event in events:
        await response.write(event)
    await response.write_eof()
    return response


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
    tap = UsageTap()  # what the answer reports it used, read as it passes (bridge.usage_tap)
    try:
        async for chunk in upstream.content.iter_any():
            tap.feed(chunk)
            out = redactor.feed(chunk) if redactor is not None else chunk
            if out:
                await response.write(out)
    except (aiohttp.ClientError, TimeoutError, OSError) as error:
        message = f"upstream stream broke: {type(error).__name__}: {error}"
        return response, Sent(upstream.status, True, message, tap.reported())
    if redactor is not None and redactor.pending:
        await response.write(redactor.flush())
    await response.write_eof()
    return response, Sent(upstream.status, True, usage=tap.reported())


class HttpUpstream:
    """POST the cleaned body to one URL with the bridge's key; stream the answer back unbuffered.

    Subclasses (one per protocol) say which agent headers are dropped, how the key is sent, which answer headers
    pass, and the protocol's error shape.
    """

    name = "http"
    dropped_request_headers: ClassVar[frozenset[str]] = DROPPED_REQUEST_HEADERS
    passed_response_headers: ClassVar[frozenset[str]] = frozenset()
    passed_response_prefixes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, base_url: str, api_key: str, *, connect_timeout_s: float = 30.0,
                 read_timeout_s: float = 600.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"upstream base URL must be http(s): {base_url!r}")
        if not api_key:
            raise ValueError(f"the {self.name} upstream needs an API key")
        self.base_url = base_url.rstrip("/")
        self.url = self.url_for(self.base_url)
        self._api_key = api_key
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s)
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # never show the key
        return f"{type(self).__name__}({self.base_url!r})"

    def url_for(self, base: str) -> str:
        """The endpoint URL under the configured base."""
        raise NotImplementedError

    def key_headers(self, api_key: str) -> dict[str, str]:
        """How the protocol carries the bridge's key."""
        raise NotImplementedError

    def error(self, status: int, message: str) -> web.Response:
        """The protocol's error answer (a failed connection to the upstream)."""
        raise NotImplementedError

    async def open(self) -> None:
        self._session = aiohttp.ClientSession(timeout=self._timeout, auto_decompress=False, trust_env=False)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def headers_for(self, request: web.Request) -> dict[str, str]:
        """The agent's headers minus hop-by-hop, auth, host and length (and ``Connection``-listed ones); then the
        bridge's key."""
        listed = {token.strip().lower() for token in request.headers.get("connection", "").split(",")}
        headers = {
            name: value for name, value in request.headers.items()
            if name.lower() not in self.dropped_request_headers and name.lower() not in listed
        }
        headers.update({**self.key_headers(self._api_key), "content-type": "application/json",
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
            return self.error(502, message), Sent(502, False, message)
        async with upstream:
            headers = {name: value for name, value in upstream.headers.items()
                       if name.lower() in self.passed_response_headers
                       or name.lower().startswith(self.passed_response_prefixes)}
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
