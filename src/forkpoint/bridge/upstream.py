"""Where the bridge sends a validated request: the protocol-independent half (pure HTTP relaying, no agent).

Each agent's own wire protocol goes to an upstream of the same protocol or to a translating one (see
``bridge.protocols``: one module per protocol with its upstream, its stub and its SSE encoding, and the registry
``make_upstream``). Here: the ``Upstream`` interface, the streamed relay (never buffered; the upstream key
redacted on the way), the HTTP pass-through base every protocol's upstream specialises, and the local stub base.
A translating upstream is one more ``Upstream``: it receives the validated body and answers the agent in the
agent's protocol; ``Sent.usage`` is where it (or a pass-through) reports what one request used.

Retries (``--upstream-retries``, policy in ``bridge.translate.retry``): ``post_with_retries`` is the one place an
upstream call is repeated. Only a failure before anything reached the agent is retried (a connection error, or an
error status whose answer the bridge has not relayed yet); once the relay started, a stream that breaks upstream is
cut for the agent too (``Sent.broken``: the run fails as retryable), while an agent that hangs up is its own
choice. Each failed attempt is a fact of the request's record (``upstream_attempts``), never a body.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import ClassVar, Protocol

import aiohttp
import orjson
from aiohttp import web

from forkpoint.bridge.secret import REDACTED as REDACTED  # re-exported: the redactor lives in bridge.secret
from forkpoint.bridge.secret import Redactor as Redactor
from forkpoint.bridge.secret import UpstreamKey
from forkpoint.bridge.translate.retry import RetryPolicy, decide
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
#: an upstream built without a policy calls once (the run's policy comes from ``--upstream-retries``)
NO_RETRIES = RetryPolicy(retries=0)
CONNECTION_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


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
    #: the answer broke after its first byte reached the agent (``error`` says how): nothing could be retried
    broken: bool = False


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
        if await write_to_agent(response, event) is not None:
            return response
    await end_for_agent(response)
    return response


async def next_chunk(upstream: aiohttp.ClientResponse) -> tuple[bytes, str | None]:
    """The next piece of the upstream's answer as it arrives (``b""`` at its end), or how the upstream broke."""
    try:
        return await upstream.content.readany(), None
    except CONNECTION_ERRORS as error:
        return b"", f"upstream stream broke: {type(error).__name__}: {error}"


async def write_to_agent(response: web.StreamResponse, data: bytes) -> str | None:
    """Write to the agent; how it went away if it did (its choice, e.g. an aborted stream: not an upstream
    failure)."""
    try:
        await response.write(data)
    except CONNECTION_ERRORS as error:
        return f"the agent closed the connection mid-answer: {type(error).__name__}: {error}"
    return None


async def end_for_agent(response: web.StreamResponse, tail: bytes = b"") -> str | None:
    """Write the answer's last bytes and its end; how the agent went away if it did. An agent may hang up as soon
    as it has read the answer's final event, before the stream's terminating chunk: its choice, and the answer was
    delivered (agents do this; codex 0.171 was seen to)."""
    if tail and (gone := await write_to_agent(response, tail)) is not None:
        return gone
    try:
        await response.write_eof()
    except CONNECTION_ERRORS as error:
        return f"the agent closed the connection before the answer's end: {type(error).__name__}: {error}"
    return None


def cut(request: web.Request) -> None:
    """Close the agent's connection at once. An answer that broke upstream after its first byte reached the agent
    must break for the agent too: a cleanly ended truncated stream would read as a whole (odd) answer, and nothing
    can be retried once the agent saw a byte."""
    request.protocol.force_close()
    if request.transport is not None:
        request.transport.abort()


async def relay(
    request: web.Request, upstream: aiohttp.ClientResponse, headers: dict[str, str], secret: str | None = None
) -> tuple[web.StreamResponse, Sent]:
    """Stream the upstream's answer to the agent chunk by chunk as it arrives: never buffered (``secret``, the
    upstream key, is redacted on the way); a stream that breaks upstream is cut for the agent."""
    key = UpstreamKey(secret)  # the one redactor (bridge.secret): header values and every streamed byte
    try:
        redactor = key.stream(upstream.headers.get("content-encoding", "identity"))
    except ValueError as error:  # compressed in a way the redactor cannot read: refused, never passed unread
        return error_response(502, "api_error", str(error)), Sent(502, True, str(error))
    response = web.StreamResponse(status=upstream.status, headers={
        name: key.text(value) for name, value in headers.items()
        if not (redactor is not None and redactor.decodes and name.lower() == "content-encoding")})
    await response.prepare(request)
    tap = UsageTap()  # what the answer reports it used, read as it passes (bridge.usage_tap)
    while True:
        chunk, broken = await next_chunk(upstream)
        if broken is not None:
            cut(request)
            return response, Sent(upstream.status, True, broken, tap.reported(), broken=True)
        if not chunk:
            break
        tap.feed(chunk)
        try:
            out = redactor.feed(chunk) if redactor is not None else chunk
        except ValueError as error:  # a compressed answer that does not decompress: broken
            cut(request)
            return response, Sent(upstream.status, True, str(error), tap.reported(), broken=True)
        if out and (gone := await write_to_agent(response, out)) is not None:
            return response, Sent(upstream.status, True, gone, tap.reported())
    try:
        tail = redactor.flush() if redactor is not None else b""
    except ValueError as error:
        cut(request)
        return response, Sent(upstream.status, True, str(error), tap.reported(), broken=True)
    gone = await end_for_agent(response, tail)
    return response, Sent(upstream.status, True, gone, usage=tap.reported())


@dataclass
class Attempted:
    """The outcome of ``post_with_retries``: the last answer (its body unread, for the caller to relay) or the last
    connection error, and one fact per attempt when any attempt failed (an empty list: the first call answered)."""

    response: aiohttp.ClientResponse | None
    error: str | None = None
    attempts: list[JsonObject] = field(default_factory=list)

    def facts(self, facts: JsonObject | None = None) -> JsonObject | None:
        """``facts`` with ``upstream_attempts`` added when there is something to say."""
        if not self.attempts:
            return facts
        return {**(facts or {}), "upstream_attempts": list(self.attempts)}


async def post_with_retries(session: aiohttp.ClientSession, url: str, data: bytes, headers: dict[str, str],
                            policy: RetryPolicy) -> Attempted:
    """POST until an answer is final: a success, a failure ``decide`` does not retry, or the retries spent.

    Nothing has reached the agent while this runs (the caller relays the returned answer), so every retried
    failure is invisible to it. A retried answer's body is discarded unread; the bridge waits ``Decision.delay_s``
    (backoff with full jitter, or the upstream's Retry-After) before the next attempt."""
    attempts: list[JsonObject] = []
    attempt = 0
    while True:
        try:
            response = await session.post(url, data=data, headers=headers, allow_redirects=False)
        except CONNECTION_ERRORS as error:
            kind = type(error).__name__
            decision = decide(policy, attempt, connection_error=kind, now=datetime.now(UTC), random=random.random)
            attempts.append({"attempt": attempt + 1, "error": kind, "retry": decision.retry,
                             "wait_s": round(decision.delay_s, 3), "reason": decision.reason})
            if not decision.retry:
                return Attempted(None, f"forkpoint bridge: upstream connection failed: {kind}: {error}", attempts)
        else:
            if response.status < 400:
                if attempts:
                    attempts.append({"attempt": attempt + 1, "status": response.status})
                return Attempted(response, None, attempts)
            decision = decide(policy, attempt, status=response.status, headers=response.headers,
                              now=datetime.now(UTC), random=random.random)
            attempts.append({"attempt": attempt + 1, "status": response.status, "retry": decision.retry,
                             "wait_s": round(decision.delay_s, 3), "reason": decision.reason})
            if not decision.retry:
                return Attempted(response, None, attempts)
            response.close()
        await asyncio.sleep(decision.delay_s)
        attempt += 1


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
                 read_timeout_s: float = 600.0, retry: RetryPolicy = NO_RETRIES) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"upstream base URL must be http(s): {base_url!r}")
        if not api_key:
            raise ValueError(f"the {self.name} upstream needs an API key")
        self.base_url = base_url.rstrip("/")
        self.url = self.url_for(self.base_url)
        self._api_key = api_key
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s)
        self._session: aiohttp.ClientSession | None = None
        #: how failures before the first byte reached the agent are retried (``post_with_retries``)
        self.retry = retry

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
        attempted = await post_with_retries(self._session, url, orjson.dumps(body), self.headers_for(request),
                                            self.retry)
        if attempted.response is None:
            message = attempted.error or "forkpoint bridge: upstream connection failed"
            return self.error(502, message), Sent(502, False, message, facts=attempted.facts())
        async with attempted.response as upstream:
            headers = {name: value for name, value in upstream.headers.items()
                       if name.lower() in self.passed_response_headers
                       or name.lower().startswith(self.passed_response_prefixes)}
            response, sent = await relay(request, upstream, headers, self._api_key)
        return response, dataclasses.replace(sent, facts=attempted.facts(sent.facts))


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
