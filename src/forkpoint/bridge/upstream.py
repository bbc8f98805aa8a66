"""Where the bridge sends a validated request: the protocol-independent half (pure HTTP relaying, no agent).

Each agent's own wire protocol goes to an upstream of the same protocol or to a translating one (see
``bridge.protocols``: one module per protocol with its upstream, its stub and its SSE encoding, and the registry
``make_upstream``). Here: the ``Upstream`` interface, the streamed relay (never buffered; the upstream key
redacted on the way), the HTTP pass-through base every protocol's upstream specialises, and the local stub base.
A translating upstream is one more ``Upstream``: it receives the validated body and answers the agent in the
agent's protocol; ``Sent.usage`` is where it (or a pass-through) reports what one request used.

Deadlines (``AnswerClock``): an upstream that goes silent (``--upstream-idle-timeout``: no byte for that long, also
while waiting for the answer's headers) or never ends its answer (``--answer-timeout``: a keep-alive drip forever)
is cut like a broken stream and recorded as a timeout (the run fails as ``model_timeout``, retryable).

Deterministic failures (``Sent.failure``): an error status the bridge no longer retries, or a 2xx answer that is not
the protocol's (``looks_like_answer``), reach the agent in its protocol's error shape (``HttpUpstream.refusal``:
a 4xx ``invalid_request_error``), and the bridge stops forwarding after a few identical ones (``bridge.server``).

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

from forkpoint.bridge.secret import MIN_REDACTED_SECRET, UpstreamKey
from forkpoint.bridge.secret import REDACTED as REDACTED  # re-exported: the redactor lives in bridge.secret
from forkpoint.bridge.secret import Redactor as Redactor
from forkpoint.bridge.subagents import AnswerReader
from forkpoint.bridge.token_capture import STREAM_REFUSED, AnswerTokens, TokenLog, refuses_streamed_ids
from forkpoint.bridge.translate.retry import RetryPolicy, decide
from forkpoint.bridge.usage_tap import UsageTap
from forkpoint.core.model import JsonObject

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
#: defaults of ``--upstream-idle-timeout`` and ``--answer-timeout`` (seconds)
IDLE_TIMEOUT_S = 300.0
ANSWER_TIMEOUT_S = 1800.0


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
    #: how the upstream failed this request, when it did (``failure_of``): ``timeout``, ``broken``,
    #: ``connection``, ``invalid_answer`` or ``http_<status>``; identical ones in a row stop the bridge forwarding
    failure: str | None = None
    #: what the agent was told of a failure (the upstream's message, key redacted): repeated to it once the bridge
    #: stopped forwarding, never written to the bridge log (it may quote the request)
    detail: str | None = None


#: ``--capture-tokens``: the run's token log, set on a model request by the bridge (``bridge.token_capture``);
#: an upstream that speaks to a real server asks it for token ids (``TokenLog.begin``) and keeps the request's
#: capture under ``ANSWER_TOKENS`` for the bridge to record
CAPTURE = web.RequestKey("forkpoint_capture", TokenLog)
ANSWER_TOKENS = web.RequestKey("forkpoint_answer_tokens", AnswerTokens)
AUXILIARY = web.RequestKey("forkpoint_auxiliary", bool)
#: reads a model answer's bytes as ``relay`` passes them to the agent (``bridge.subagents``)
ANSWER_READER = web.RequestKey("forkpoint_answer_reader", AnswerReader)


def begin_capture(request: web.Request, protocol: str, body: JsonObject, *, strip: bool = True) -> JsonObject:
    """The body to send: asking for token ids when the run captures them (else ``body`` itself)."""
    log = request.get(CAPTURE)
    if log is None:
        return body
    body, answer = log.begin(protocol, body, strip=strip, auxiliary=request.get(AUXILIARY, False))
    request[ANSWER_TOKENS] = answer
    return body


#: how ``Sent.error`` begins when the agent hung up while an answer was still coming (it was waiting on the model)
GONE_MID_ANSWER = "the agent closed the connection mid-answer"
#: how a timed-out answer's ``Sent.error`` begins (``timed_out``)
TIMED_OUT = "upstream timed out: "
#: the most of an upstream's error body the bridge reads (to re-shape it for the agent)
MAX_ERROR_BYTES = 64 * 1024
#: how an SSE stream's first non-empty line begins (a field or a comment), and a JSON answer's first byte
SSE_FIELDS = (b"data:", b"event:", b"id:", b"retry:", b":")


@dataclass(frozen=True)
class AnswerClock:
    """The deadlines of one answer: the whole answer must end by ``deadline`` (event-loop time, from
    ``--answer-timeout``), and no gap between two pieces may exceed ``idle_s`` (``--upstream-idle-timeout``; the
    HTTP client's read timeout enforces it, also before the headers)."""

    deadline: float
    answer_s: float
    idle_s: float

    @classmethod
    def start(cls, answer_s: float, idle_s: float) -> AnswerClock:
        return cls(asyncio.get_running_loop().time() + answer_s, answer_s, idle_s)

    def expired(self) -> bool:
        return asyncio.get_running_loop().time() >= self.deadline

    def why(self) -> str:
        """What a timeout that just fired means (the deadline, or an idle gap)."""
        if self.expired():
            return f"{TIMED_OUT}the answer did not end within {self.answer_s:g} s (--answer-timeout)"
        return f"{TIMED_OUT}nothing arrived for {self.idle_s:g} s (--upstream-idle-timeout)"


def timed_out(error: str | None) -> bool:
    return error is not None and error.startswith(TIMED_OUT)


def failure_of(status: int, error: str | None = None, *, broken: bool = False) -> str | None:
    """The failure class of one upstream answer (None: it succeeded): identical classes in a row are what the
    bridge counts before it stops forwarding."""
    if timed_out(error):
        return "timeout"
    if broken:
        return "broken"
    if status >= 400:
        return f"http_{status}"
    return None


def looks_like_answer(first: bytes) -> bool:
    """Whether the first bytes of a 2xx answer can begin the protocol's answer: an SSE stream (its first non-empty
    line a field or a comment: a piece of one counts) or a JSON object, whatever the content type says. Anything
    else (an HTML page, binary, plain text) would only make the agent fail and send the same request again."""
    head = first.lstrip()
    return not head or head.startswith(b"{") or any(head[:len(name)] == name[:len(head)] for name in SSE_FIELDS)


def compressed(upstream: aiohttp.ClientResponse) -> bool:
    """An answer compressed despite ``accept-encoding: identity``: its bytes are the agent's to decode, not judged."""
    return upstream.headers.get("content-encoding", "identity").strip().lower() not in ("", "identity")


class UpstreamRefusal(Exception):
    """Raised by ``Upstream.send`` before anything left the bridge: the request cannot be carried (e.g. a body the
    translator cannot translate without silent loss); the bridge records and answers it as a refusal."""


class Upstream(Protocol):
    name: str

    async def open(self) -> None: ...

    async def close(self) -> None: ...

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]: ...


def error_message(raw: bytes, secret: str | None) -> str:
    """The message of an upstream error body (``error.message`` of a JSON error, else the text), redacted and
    bounded, for an error the bridge writes in the agent's protocol."""
    try:
        value = orjson.loads(raw)
        detail = value.get("error", value) if isinstance(value, dict) else value
        message = str(detail.get("message", detail) if isinstance(detail, dict) else detail)
    except orjson.JSONDecodeError:
        message = " ".join(raw.decode("utf-8", "replace").split())
    if secret and len(secret) >= MIN_REDACTED_SECRET:
        message = message.replace(secret, REDACTED.decode())
    return message[:2000]


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


async def next_chunk(upstream: aiohttp.ClientResponse,
                     clock: AnswerClock | None = None) -> tuple[bytes, str | None]:
    """The next piece of the upstream's answer as it arrives (``b""`` at its end), or how the upstream broke (a
    timeout of ``clock``'s: ``timed_out``)."""
    try:
        if clock is None:
            return await upstream.content.readany(), None
        async with asyncio.timeout_at(clock.deadline):
            return await upstream.content.readany(), None
    except TimeoutError:  # the deadline, or the client's read timeout (an idle gap)
        return b"", clock.why() if clock is not None else f"{TIMED_OUT}the upstream's read timeout"
    except CONNECTION_ERRORS as error:
        return b"", f"upstream stream broke: {type(error).__name__}: {error}"


async def write_to_agent(response: web.StreamResponse, data: bytes) -> str | None:
    """Write to the agent; how it went away if it did (its choice, e.g. an aborted stream: not an upstream
    failure)."""
    try:
        await response.write(data)
    except CONNECTION_ERRORS as error:
        return f"{GONE_MID_ANSWER}: {type(error).__name__}: {error}"
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


def route_path(request: web.Request) -> str:
    """The request's path under the bridge's token (``/v1beta/models/m:streamGenerateContent``), with its query: the
    server routes only token-prefixed paths to an upstream."""
    tail = "/" + request.rel_url.path.lstrip("/").partition("/")[2]
    return f"{tail}?{request.query_string}" if request.query_string else tail


def cut(request: web.Request) -> None:
    """Close the agent's connection at once. An answer that broke upstream after its first byte reached the agent
    must break for the agent too: a cleanly ended truncated stream would read as a whole (odd) answer, and nothing
    can be retried once the agent saw a byte."""
    request.protocol.force_close()
    if request.transport is not None:
        request.transport.abort()


async def relay(
    request: web.Request, upstream: aiohttp.ClientResponse, headers: dict[str, str], secret: str | None = None,
    clock: AnswerClock | None = None, first: bytes = b"", tokens: AnswerTokens | None = None
) -> tuple[web.StreamResponse, Sent]:
    """Stream the upstream's answer to the agent chunk by chunk as it arrives: never buffered (``secret``, the
    upstream key, is redacted on the way); a stream that breaks upstream or outlives ``clock`` is cut for the agent.
    ``first``: the answer's first bytes, already read (``HttpUpstream.send`` looks at them first). ``tokens``
    (``--capture-tokens``): reads the token fields of the redacted bytes and removes the ones the bridge asked for
    (an SSE event, or a whole JSON answer, reaches the agent once complete)."""
    key = UpstreamKey(secret)  # the one redactor (bridge.secret): header values and every streamed byte
    try:
        redactor = key.stream(upstream.headers.get("content-encoding", "identity"))
    except ValueError as error:  # compressed in a way the redactor cannot read: refused, never passed unread
        return error_response(502, "api_error", str(error)), Sent(502, True, str(error))
    if tokens is not None and tokens.unavailable is not None:
        tokens = None
    if tokens is not None and redactor is None and compressed(upstream):  # bytes it cannot read: passed as they are
        tokens.problems.append("a compressed answer (not read)")
        tokens = None
    response = web.StreamResponse(status=upstream.status, headers={
        name: key.text(value) for name, value in headers.items()
        if not (redactor is not None and redactor.decodes and name.lower() == "content-encoding")
        and not (tokens is not None and name.lower() == "content-length")})
    await response.prepare(request)
    tap = UsageTap()  # what the answer reports it used, read as it passes (bridge.usage_tap)
    reader = request.get(ANSWER_READER)
    pending = first
    while True:
        chunk, broken = (pending, None) if pending else await next_chunk(upstream, clock)
        pending = b""
        if broken is not None:
            cut(request)
            return response, Sent(upstream.status, True, broken, tap.reported(), broken=True,
                                  failure=failure_of(upstream.status, broken, broken=True))
        if not chunk:
            break
        tap.feed(chunk)
        if reader is not None:
            reader.feed(chunk)
        try:
            out = redactor.feed(chunk) if redactor is not None else chunk
        except ValueError as error:  # a compressed answer that does not decompress: broken
            cut(request)
            return response, Sent(upstream.status, True, str(error), tap.reported(), broken=True)
        if out and tokens is not None:
            out = tokens.feed(out)
        if out and (gone := await write_to_agent(response, out)) is not None:
            return response, Sent(upstream.status, True, gone, tap.reported())
    try:
        tail = redactor.flush() if redactor is not None else b""
        if tokens is not None:
            tail = tokens.feed(tail) + tokens.flush()
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
    #: the last attempt (or the answer deadline) timed out before an answer
    timed_out: bool = False

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
                if isinstance(error, TimeoutError):
                    return Attempted(None, f"{TIMED_OUT}no answer (forkpoint bridge: {kind}: {error})", attempts,
                                     timed_out=True)
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


async def post_within(clock: AnswerClock, session: aiohttp.ClientSession, url: str, data: bytes,
                      headers: dict[str, str], policy: RetryPolicy) -> Attempted:
    """``post_with_retries`` within the answer's deadline (the retries and their waits count against it)."""
    try:
        async with asyncio.timeout_at(clock.deadline):
            return await post_with_retries(session, url, data, headers, policy)
    except TimeoutError:
        return Attempted(None, clock.why(), [], timed_out=True)


def failed_attempt(attempted: Attempted) -> tuple[int, str, str]:
    """The agent's status, the message and the failure class of a call that got no answer (504 for a timeout)."""
    message = attempted.error or "forkpoint bridge: upstream connection failed"
    return (504, message, "timeout") if attempted.timed_out else (502, message, "connection")


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
                 read_timeout_s: float = IDLE_TIMEOUT_S, answer_timeout_s: float = ANSWER_TIMEOUT_S,
                 retry: RetryPolicy = NO_RETRIES) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"upstream base URL must be http(s): {base_url!r}")
        if not api_key:
            raise ValueError(f"the {self.name} upstream needs an API key")
        self.base_url = base_url.rstrip("/")
        self.url = self.url_for(self.base_url)
        self._api_key = api_key
        self._timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s)
        #: ``--upstream-idle-timeout`` (the client's read timeout) and ``--answer-timeout`` (``AnswerClock``)
        self.idle_timeout_s = read_timeout_s
        self.answer_timeout_s = answer_timeout_s
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

    def refusal(self, status: int, message: str) -> web.Response:
        """The protocol's error answer an agent does not retry (``invalid_request_error``): a deterministic upstream
        failure, re-shaped (``status`` a 4xx)."""
        raise NotImplementedError

    def clock(self) -> AnswerClock:
        return AnswerClock.start(self.answer_timeout_s, self.idle_timeout_s)

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

    def target(self, request: web.Request, body: JsonObject) -> tuple[str, JsonObject]:
        """The URL one request goes to and the body sent there: the endpoint with the agent's query string (the
        Gemini API puts the model in the path instead: its upstream overrides this)."""
        return self.url + (f"?{request.query_string}" if request.query_string else ""), body

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]:
        assert self._session is not None, "upstream not opened"
        url, body = self.target(request, body)
        clock = self.clock()
        agent_body, body = body, begin_capture(request, self.name, body)
        attempted = await post_within(clock, self._session, url, orjson.dumps(body), self.headers_for(request),
                                      self.retry)
        refused, peeked = await self._refused_stream_ids(request, attempted, agent_body)
        if refused and attempted.response is not None:  # SGLang refused the id fields on a stream: once again
            attempted.response.close()  # without them
            peeked = None
            body = begin_capture(request, self.name, agent_body)
            attempted = await post_within(clock, self._session, url, orjson.dumps(body), self.headers_for(request),
                                          self.retry)
        if attempted.response is None:
            status, message, failure = failed_attempt(attempted)
            return self.error(status, message), Sent(status, False, message, facts=attempted.facts(),
                                                     failure=failure)
        async with attempted.response as upstream:
            headers = {name: value for name, value in upstream.headers.items()
                       if name.lower() in self.passed_response_headers
                       or name.lower().startswith(self.passed_response_prefixes)}
            if upstream.status >= 400:
                response, sent = (self._failed_with(upstream, headers, peeked) if peeked is not None
                                  else await self._failed(upstream, headers))
            else:
                first, broken = await next_chunk(upstream, clock)
                if broken is not None:  # before any byte reached the agent: its protocol's error, nothing to cut
                    response = self.error(504 if timed_out(broken) else 502, broken)
                    sent = Sent(response.status, True, broken, failure=failure_of(200, broken, broken=True))
                elif not looks_like_answer(first) and not compressed(upstream):
                    response, sent = self._invalid(upstream, first)
                else:
                    response, sent = await relay(request, upstream, headers, self._api_key, clock, first,
                                                 request.get(ANSWER_TOKENS))
        return response, dataclasses.replace(sent, facts=attempted.facts(sent.facts))

    async def _refused_stream_ids(self, request: web.Request, attempted: Attempted,
                                  agent_body: JsonObject) -> tuple[bool, bytes | None]:
        """``--capture-tokens``: whether the answer is the upstream's HTTP 400 refusing the id fields the bridge
        added to a streamed request (SGLang's ``serving_chat.py``: "return_token_ids is not supported with
        streaming"), and the error body when it was read to tell (bounded; ``_failed`` passes it on)."""
        answer, log = request.get(ANSWER_TOKENS), request.get(CAPTURE)
        response = attempted.response
        if response is None or response.status != 400 or answer is None or log is None \
                or not answer.added & set(STREAM_REFUSED):
            return False, None
        raw = await response.content.read(MAX_ERROR_BYTES)
        return refuses_streamed_ids(raw) and log.refused_streamed_ids(agent_body), raw

    async def _failed(self, upstream: aiohttp.ClientResponse,
                      headers: dict[str, str]) -> tuple[web.StreamResponse, Sent]:
        """A final error answer: passed on when it is the protocol's JSON error, else (an HTML page from a proxy,
        plain text) re-shaped into it, a 4xx as the non-retryable ``refusal``; read bounded, the key redacted."""
        return self._failed_with(upstream, headers, await upstream.content.read(MAX_ERROR_BYTES))

    def _failed_with(self, upstream: aiohttp.ClientResponse, headers: dict[str, str],
                     raw: bytes) -> tuple[web.StreamResponse, Sent]:
        """``_failed`` of an error body already read (bounded)."""
        failure = failure_of(upstream.status)
        error = f"upstream answered HTTP {upstream.status}"
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            value = None
        message = error_message(raw, self._api_key)
        if isinstance(value, dict) and "error" in value and len(raw) < MAX_ERROR_BYTES:
            if len(self._api_key) >= MIN_REDACTED_SECRET:
                raw = raw.replace(self._api_key.encode(), REDACTED)
            response = web.Response(status=upstream.status, body=raw, headers=headers)
        elif upstream.status < 500 and upstream.status not in (408, 429):
            response = self.refusal(upstream.status, f"upstream HTTP {upstream.status}: {message}")
        else:
            response = self.error(upstream.status, f"upstream HTTP {upstream.status}: {message}")
        for name in ("Retry-After", "retry-after-ms", "x-should-retry"):
            if name in upstream.headers and name not in response.headers:
                response.headers[name] = upstream.headers[name]
        return response, Sent(upstream.status, True, error, failure=failure,
                              detail=f"upstream HTTP {upstream.status}: {message}")

    def _invalid(self, upstream: aiohttp.ClientResponse, first: bytes) -> tuple[web.StreamResponse, Sent]:
        """A 2xx answer that is not the protocol's: the agent gets the non-retryable error (it would fail on the
        answer and send the same request again), nothing of the answer."""
        kind = upstream.headers.get("content-type", "no content type")
        message = (f"forkpoint bridge: the {self.name} upstream's HTTP {upstream.status} answer is not SSE or JSON "
                   f"({kind}, {len(first)} bytes beginning {error_message(first[:80], self._api_key)[:80]!r})")
        return self.refusal(400, message), Sent(400, True, message, failure="invalid_answer", detail=message)


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
