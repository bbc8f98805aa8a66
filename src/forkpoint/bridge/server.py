"""The model bridge: a loopback aiohttp server between the resumed agent and its model (the only I/O shell).

* Listens on 127.0.0.1 (random port) in a background thread with its own event loop; refuses non-loopback
  clients. Every route lives under a per-run secret path token: the agent's base URL is
  ``http://127.0.0.1:PORT/<token>``; anything else gets 404 and nothing is forwarded.
* ``POST`` to one of the gate's ``model_routes``: every body goes through the gate (``gate.first`` for the first
  model request, ``gate.later`` after it; ``gate.auxiliary`` first, for helper requests that are not steps). A
  refusal answers HTTP 400 and puts the bridge in the FAILED state: every later request is refused and nothing is
  ever forwarded again. A validated body goes through the body hook (``prepare``, identity by default: the place
  where a chosen model and sampling pins are set after validation) to the upstream (see ``bridge.protocols``).
* ``POST .../messages/count_tokens`` is answered locally; ``HEAD``/``GET`` anything answers 200 (some agents send
  a ``HEAD`` connectivity check first).
* The verdict log (in memory, optionally JSONL) holds per-request facts only: never bodies, prompts or keys; it keeps
  the first ``MAX_RECORDS`` requests (a flood is counted, not listed). A request handed to the upstream also gets
  its usage and upstream latency (``bridge.accounting``), summed in ``BridgeSummary.model_usage``.
* Connections, requests in flight, buffered body bytes and slow headers/bodies are bounded (``bridge.limits``): load
  is shed with 503/408 and a closed connection, never by failing the bridge.
* Upstream failures the agent would retry without end (a deterministic 400, an answer that is not the protocol's, an
  upstream that times out every time): after ``max_identical_failures`` identical ones in a row (``Sent.failure``)
  the bridge forwards no more model requests and answers them with the protocol's non-retryable error; the run
  fails with the failure's typed error (``BridgeSummary.error``).
"""

from __future__ import annotations

import asyncio
import hmac
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import orjson
from aiohttp import web

from forkpoint.bridge.accounting import Timing, UsageLedger
from forkpoint.bridge.gate import Gate, Verdict
from forkpoint.bridge.limits import ByteBudget, Connections, Limits, Shed, shed_headers
from forkpoint.bridge.subagents import Subagents
from forkpoint.bridge.token_capture import AnswerTokens, TokenLog
from forkpoint.bridge.upstream import (
    ANSWER_READER,
    ANSWER_TOKENS,
    AUXILIARY,
    CAPTURE,
    GONE_MID_ANSWER,
    Sent,
    Upstream,
    UpstreamRefusal,
    error_response,
)
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import JsonObject
from forkpoint.core.protocols import load
from forkpoint.process.loop_thread import LoopThread

#: a post-validation body hook: (validated body, facts to record) -> the body to send upstream
BodyHook = Callable[[JsonObject, JsonObject], JsonObject]
#: sees a validated body without changing it (must not raise)
BodyObserver = Callable[[JsonObject], None]

MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_RECORDS = 10_000
LOOPBACK = frozenset({"127.0.0.1", "::1", "::ffff:127.0.0.1"})
REFUSAL_PREFIX = "forkpoint bridge refused: "
START_TIMEOUT_S = 10.0
#: when the answer to a request began: its headers went to the agent (``_answer_started``)
ANSWER_STARTED = web.RequestKey("forkpoint_answer_started", float)
ANSWER_KEYS = frozenset({"usage", "ttfb_ms", "upstream_ms"})
STOP_TIMEOUT_S = 10.0
SHUTDOWN_GRACE_S = 2.0
#: identical upstream failures in a row after which the bridge stops forwarding model requests
MAX_IDENTICAL_FAILURES = 3
#: an upstream failure class (``Sent.failure``) -> the run's error kind when the bridge stopped forwarding
FAILURE_KINDS = {"timeout": ErrorKind.MODEL_TIMEOUT, "broken": ErrorKind.MODEL_CONNECTION,
                 "connection": ErrorKind.MODEL_CONNECTION, "http_408": ErrorKind.MODEL_TIMEOUT,
                 "http_429": ErrorKind.MODEL_RATE_LIMIT, "invalid_answer": ErrorKind.MODEL_INTERNAL,
                 "failed_answer": ErrorKind.MODEL_INTERNAL}


def failure_kind(failure: str) -> ErrorKind:
    """The run's error for a failure class: a 5xx is the upstream's trouble (retryable), any other 4xx a request
    it refuses every time (not retryable: the same body gets the same answer)."""
    if failure in FAILURE_KINDS:
        return FAILURE_KINDS[failure]
    return ErrorKind.MODEL_INTERNAL if failure.startswith("http_5") else ErrorKind.CONTINUATION


@dataclass(frozen=True)
class RequestRecord:
    """One request the bridge saw. ``path`` never contains the token; nothing here holds a body or a key."""

    seq: int
    method: str
    path: str
    #: "ok" (validated), "subagent" (a sub-agent conversation the bridge proved descends from a forwarded answer:
    #: ``bridge.subagents``), "refused", "local" (answered by the bridge), "not_found"...
    verdict: str
    reason: str | None
    forwarded: bool
    status: int
    duration_ms: float
    facts: dict[str, Any] = field(default_factory=dict)
    #: what the upstream reported it used for this request (tokens...), when it reports it; never a body
    usage: dict[str, Any] | None = None
    #: a request handed to the upstream: ms until the answer's headers went to the agent, and until it ended
    ttfb_ms: float | None = None
    upstream_ms: float | None = None

    def to_json(self) -> dict[str, Any]:  # only requests the upstream answered (and reported) have the last three
        return {key: value for key, value in asdict(self).items() if value is not None or key not in ANSWER_KEYS}


#: how the continuation error of a gate refusal begins (a calibration tells it from a run that made no request)
REFUSED = "the model bridge refused the resumed agent's request:"


@dataclass(frozen=True)
class BridgeSummary:
    model_requests: int
    validated: int
    forwarded: int
    refused: int
    first_failure: str | None
    #: model requests answered "step budget reached" (the agent's budget, not a gate failure)
    over_budget: int = 0
    #: helper requests (not steps) the gate cleared, e.g. an agent's title generation
    auxiliary: int = 0
    #: requests and connections refused for load or slowness (503/408, closed): the agent may retry them
    shed: int = 0
    #: requests beyond ``MAX_RECORDS`` (counted, not listed in the verdict log)
    unrecorded: int = 0
    #: the first model answer that broke after its first byte reached the agent (never retried: the agent saw part
    #: of an answer, so the run fails as a retryable model connection error)
    upstream_broken: str | None = None
    #: calls, tokens and upstream latency (``UsageLedger.to_json``); in the result metadata as ``model_usage``
    model_usage: dict[str, Any] = field(default_factory=dict)
    #: the first helper answer that broke after its first byte (a fact, not a failure: a helper request is no step
    #: of the conversation, and the agent decides what a lost title or summary means to it)
    auxiliary_broken: str | None = None
    #: the first model answer that broke did so on a timeout (``--upstream-idle-timeout``, ``--answer-timeout``)
    upstream_timed_out: bool = False
    #: why the bridge stopped forwarding (identical upstream failures in a row)
    upstream_stopped: str | None = None
    #: the class (``Sent.failure``) and message of the last model answer when the upstream failed it: the run's
    #: error when the agent then gave up by itself (``continuation.triage``)
    upstream_failure: str | None = None
    upstream_failure_message: str | None = None
    #: model answers still in flight when the bridge stopped, or the last one abandoned by the agent mid-answer (the
    #: agent was waiting on the upstream when it ended)
    in_flight_at_stop: int = 0
    #: sub-agent requests forwarded (``bridge.subagents``): not counted in ``validated``
    subagent: int = 0

    @property
    def budget_reached(self) -> bool:
        return self.over_budget > 0

    @property
    def failed(self) -> bool:
        return self.first_failure is not None

    def error(self) -> ReplayError | None:
        """The continuation error the run must fail with, or None when the bridge did its job."""
        if self.first_failure is not None:
            return ReplayError(ErrorKind.CONTINUATION, f"{REFUSED} {self.first_failure}")
        if self.validated == 0:
            return ReplayError(ErrorKind.CONTINUATION, "the resumed agent made no model request through the bridge")
        if self.upstream_broken is not None:
            if self.upstream_timed_out:
                return ReplayError(ErrorKind.MODEL_TIMEOUT, "the model upstream's answer was cut after its first "
                                                            f"byte reached the agent: {self.upstream_broken}")
            return ReplayError(ErrorKind.MODEL_CONNECTION, "the model upstream's answer broke after its first byte "
                                                           f"reached the agent (not retried): {self.upstream_broken}")
        if self.upstream_stopped is not None:
            return ReplayError(failure_kind(self.upstream_failure or ""), self.upstream_stopped)
        return None

    def to_json(self) -> dict[str, Any]:  # ``model_bridge``: ``model_usage`` is a metadata key of its own
        return {**{key: value for key, value in asdict(self).items() if key != "model_usage"}, "failed": self.failed}


class Bridge:
    """``with Bridge(gate, upstream) as bridge: run the agent with its base URL set to bridge.base_url``."""

    def __init__(self, gate: Gate, upstream: Upstream, *, log_path: Path | None = None,
                 max_model_requests: int | None = None, limits: Limits | None = None,
                 prepare: BodyHook | None = None, observe_first: BodyObserver | None = None,
                 refusal: Callable[[int, str], web.Response] | None = None,
                 max_identical_failures: int = MAX_IDENTICAL_FAILURES, tokens: TokenLog | None = None) -> None:
        """``gate`` checks every model request; ``prepare`` changes a body only AFTER the gate validated it (e.g.
        the model field and sampling pins of a chosen model); its facts join the request's record. ``refusal``:
        the agent's protocol's non-retryable error (default: Anthropic's shape), what a request gets once the bridge
        stopped forwarding after ``max_identical_failures`` identical upstream failures. ``tokens``
        (``--capture-tokens``): every request handed to the upstream gets a record in this log
        (``bridge.token_capture``)."""
        self.tokens = tokens
        self._refusal = refusal or (lambda status, message: error_response(status, "invalid_request_error",
                                                                           message))
        self.gate = gate
        self.upstream = upstream
        self._prepare = prepare
        #: sees the first validated body once, before ``prepare`` (``--record-tool-schemas``)
        self._observe_first = observe_first
        self._log_path = log_path
        self._token = secrets.token_urlsafe(24)
        self._lock = threading.Lock()
        self._records: list[RequestRecord] = []
        self._model_requests = 0
        #: a step budget enforced at the wire, for agents without a max-steps option of their own
        self._max_model_requests = max_model_requests
        self._over_budget = 0
        self._auxiliary_count = 0
        self._auxiliary_broken: str | None = None
        self._validated = 0
        self._forwarded = 0
        self._refused = 0
        self._failure: str | None = None
        self._serving: LoopThread[None] = LoopThread("forkpoint-bridge")
        self._runner: web.AppRunner | None = None
        self._log_handle: IO[bytes] | None = None
        self._port: int | None = None
        self.limits = limits or Limits()
        self._connections = Connections(self.limits)
        self._budget = ByteBudget(self.limits.max_buffered_bytes)
        self._in_flight = 0
        self._shed = 0
        self._unrecorded = 0
        self._broken: str | None = None
        self._broken_timed_out = False
        #: the last model answer's failure class and how many identical ones in a row; the stop reason once reached
        self._streak: tuple[str | None, int] = (None, 0)
        self._last_failure: str | None = None
        #: what the agent was told of the last failure (``Sent.detail``): in memory only, never logged
        self._last_detail: str | None = None
        self._stopped: str | None = None
        self._max_identical_failures = max_identical_failures
        self._upstream_calls = 0
        #: the last model answer ended because the agent hung up on it (e.g. killed at its deadline)
        self._abandoned = False
        self._in_flight_at_stop = 0
        self._ledger = UsageLedger()
        self._server: asyncio.Server | None = None
        #: the sub-agent conversations the gate's agent may start live (None: its protocol or gate has none)
        wire = load(gate.name).subagents if gate.subagent_tools else None
        self._subagents = Subagents(wire, gate.subagent_tools) if wire is not None else None
        self._subagent_count = 0

    def __repr__(self) -> str:  # never show the token
        return f"Bridge(port={self._port}, upstream={self.upstream.name})"

    # -- lifecycle -----------------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """What the agent gets as ``ANTHROPIC_BASE_URL`` (contains the secret token: do not log it)."""
        if self._port is None:
            raise RuntimeError("the bridge is not running")
        return f"http://127.0.0.1:{self._port}/{self._token}"

    @property
    def port(self) -> int | None:
        return self._port

    def start(self) -> str:
        """Start in a background thread; returns ``base_url`` once the server listens."""
        if self._serving.loop is not None:
            raise RuntimeError("the bridge was already started")
        if self._log_path is not None:
            self._log_handle = self._log_path.open("ab")
        try:
            self._serving.start(self._serve, self._shutdown, START_TIMEOUT_S)
        except TimeoutError:
            raise ReplayError(ErrorKind.INTERNAL,
                              f"the model bridge did not start within {START_TIMEOUT_S:.0f} s") from None
        except Exception as error:
            raise ReplayError(ErrorKind.INTERNAL, f"the model bridge failed to start: {error}") from error
        return self.base_url

    async def _serve(self) -> None:
        await self.upstream.open()
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.on_response_prepare.append(_answer_started)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # in-flight handlers (a stalled upstream stream) get a short grace at shutdown, not aiohttp's 60 s
        # lingering_time=0: a request whose body the bridge refused to read is answered and its connection closed,
        # instead of aiohttp reading (and discarding) whatever the client still sends for 10 s
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_GRACE_S,
                                     keepalive_timeout=self.limits.idle_timeout_s, lingering_time=0)
        await self._runner.setup()
        # our own listener instead of a TCPSite: every connection goes through the guard (bridge.limits)
        server = self._runner.server
        assert server is not None  # set by setup()
        factory = self._connections.wrap(server)
        self._server = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
        self._port = int(self._server.sockets[0].getsockname()[1])

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()  # stop accepting; the runner's cleanup closes the open connections
            self._server = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        await self.upstream.close()

    def stop(self) -> None:
        """Stop the server (idempotent: a second call only waits, it never interrupts the first call's shutdown);
        in-flight requests are cut."""
        with self._lock:
            if self._serving.loop is not None and self._in_flight_at_stop == 0:
                self._in_flight_at_stop = self._upstream_calls + int(self._abandoned)
        self._serving.stop(STOP_TIMEOUT_S)
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None

    def __enter__(self) -> Bridge:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.stop()

    # -- results ---------------------------------------------------------------------------------------------------

    @property
    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    def summary(self) -> BridgeSummary:
        with self._lock:
            return BridgeSummary(self._model_requests, self._validated, self._forwarded, self._refused,
                                 self._failure, self._over_budget, self._auxiliary_count,
                                 self._shed + self._connections.refused + self._connections.timed_out,
                                 self._unrecorded, self._broken, self._ledger.to_json(), self._auxiliary_broken,
                                 self._broken_timed_out, self._stopped, self._streak[0], self._last_failure,
                                 self._in_flight_at_stop, self._subagent_count)

    def finish(self) -> BridgeSummary:
        """Stop the bridge and summarise it; ``summary.error()`` is the run's continuation error, if any."""
        self.stop()
        return self.summary()

    # -- handling --------------------------------------------------------------------------------------------------

    def _strip_token(self, path: str) -> str | None:
        """The path under the token, or None when the token is missing or wrong."""
        head, _, rest = path.lstrip("/").partition("/")
        if not hmac.compare_digest(head.encode(), self._token.encode()):
            return None
        return "/" + rest

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        started = time.monotonic()
        if request.remote not in LOOPBACK:
            response = error_response(403, "permission_error", "forkpoint bridge: loopback clients only")
            self._record(request.method, "(remote client)", "refused", "non-loopback client", False, 403, started)
            return response
        path = self._strip_token(request.rel_url.path)
        if path is None:
            self._record(request.method, "(outside the token)", "not_found", "missing or wrong path token", False,
                         404, started)
            response = error_response(404, "not_found_error", "not found")
            response.force_close()  # its body is never read: close instead of draining it
            return response
        shown = path + (f"?{request.query_string}" if request.query_string else "")
        if self._in_flight >= self.limits.max_in_flight:
            return self._shed_response(request.method, shown, Shed(503, "too many requests in flight"), started)
        self._in_flight += 1
        self._connections.request_started(request.transport)
        reserved: list[int] = []  # body bytes this request holds in the shared budget
        try:
            return await self._route(request, path, shown, started, reserved)
        except Shed as shed:
            return self._shed_response(request.method, shown, shed, started)
        finally:
            self._budget.release(sum(reserved))
            self._in_flight -= 1
            self._connections.request_finished(request.transport)

    async def _route(self, request: web.Request, path: str, shown: str, started: float,
                     reserved: list[int]) -> web.StreamResponse:
        if request.method in ("HEAD", "GET"):
            self._record(request.method, shown, "local", None, False, 200, started)
            return web.Response(status=200, text="ok")
        model = request.method == "POST" and path.rstrip("/") in self.gate.model_routes
        count = request.method == "POST" and path.rstrip("/").endswith("/messages/count_tokens")
        earlier = self._failed_reason() if model or count else None
        if earlier is not None:  # a failed bridge answers no model request, and counts no more tokens
            return self._refuse(request.method, shown, f"the bridge FAILED earlier ({earlier})", started)
        if model:
            return await self._messages(request, shown, started, reserved)
        if count:
            return await self._count_tokens(request, shown, started, reserved)
        self._record(request.method, shown, "not_found", "no such route on the bridge", False, 404, started)
        return error_response(404, "not_found_error", "not found")

    def _refuse(self, method: str, path: str, reason: str, started: float,
                facts: dict[str, Any] | None = None) -> web.Response:
        with self._lock:
            self._refused += 1
            if self._failure is None:
                self._failure = reason
        self._record(method, path, "refused", reason, False, 400, started, facts)
        return error_response(400, "invalid_request_error", REFUSAL_PREFIX + reason)

    def _shed_response(self, method: str, path: str, shed: Shed, started: float) -> web.Response:
        """Load or slowness, not a gate verdict: answered, the connection closed, the bridge stays as it was."""
        self._shed += 1
        self._record(method, path, "shed", shed.reason, False, shed.status, started)
        kind = {503: "overloaded_error", 408: "request_timeout", 413: "request_too_large"}.get(shed.status, "error")
        response = error_response(shed.status, kind, f"forkpoint bridge: {shed.reason}; retry")
        response.headers.update(shed_headers())
        response.force_close()
        return response

    def _failed_reason(self) -> str | None:
        with self._lock:
            return self._failure

    async def _read_body(self, request: web.Request, reserved: list[int]) -> bytes:
        """The body, read against the shared byte budget and the body deadline (see ``bridge.limits``).

        Raises ValueError over the per-request cap (a gate refusal, as before) and Shed when the budget is exhausted
        or the body is too slow (load: the bridge does not fail).
        """
        declared = request.content_length
        if declared is not None and declared > MAX_BODY_BYTES:
            raise ValueError(f"the request body is larger than {MAX_BODY_BYTES} bytes")
        if declared is not None:
            if not self._budget.reserve(declared):
                raise Shed(503, "the bridge is buffering too many request bytes")
            reserved.append(declared)
        chunks: list[bytes] = []
        size = 0
        try:
            async with asyncio.timeout(self.limits.body_timeout_s):
                while chunk := await request.content.readany():
                    size += len(chunk)
                    if size > MAX_BODY_BYTES:
                        raise ValueError(f"the request body is larger than {MAX_BODY_BYTES} bytes")
                    if declared is None:
                        if not self._budget.reserve(len(chunk)):
                            raise Shed(503, "the bridge is buffering too many request bytes")
                        reserved.append(len(chunk))
                    chunks.append(chunk)
        except TimeoutError:
            raise Shed(408, f"the request body did not arrive within {self.limits.body_timeout_s:g} s") from None
        return b"".join(chunks)

    async def _read_json(self, request: web.Request, reserved: list[int]) -> tuple[bytes, Any]:
        raw = await self._read_body(request, reserved)
        try:
            return raw, orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            raise ValueError(f"the request body is not JSON: {error}") from None

    async def _messages(self, request: web.Request, shown: str, started: float,
                        reserved: list[int]) -> web.StreamResponse:
        try:
            _, body = await self._read_json(request, reserved)
        except ValueError as error:
            return self._refuse(request.method, shown, str(error), started)
        helper = self.gate.auxiliary(body)
        if helper is not None:
            return await self._auxiliary(request, shown, started, helper)
        with self._lock:
            budget = self._max_model_requests
            if budget is not None and self._validated + self._subagent_count >= budget:  # a sub-agent's steps too
                self._over_budget += 1
                over = True
            else:
                over = False
                self._model_requests += 1
                first = self._model_requests == 1
        if over:
            self._record(request.method, shown, "over_budget", "step budget reached", False, 400, started)
            return error_response(400, "invalid_request_error", "forkpoint: the step budget (--max-steps) is reached")
        with self._lock:
            stopped, detail = self._stopped, self._last_detail
        if stopped is not None:  # nothing more goes upstream: the agent gets the error it does not retry
            self._record(request.method, shown, "stopped", stopped, False, 400, started)
            return self._refusal(400, f"forkpoint bridge: {stopped}; the upstream's last answer: {detail}")
        verdict: Verdict
        verdict = self.gate.first(body) if first else self.gate.later(body)
        subagent = False
        if not verdict.ok and not first and self._subagents is not None:
            why, found = self._subagents.admit(body)
            if why is None:
                verdict, subagent = Verdict(True, body, None, {"first_request": False, **found}), True
            else:
                verdict = Verdict(False, None, f"{verdict.reason} (nor a sub-agent request: {why})", verdict.facts)
        if not verdict.ok or verdict.body is None:
            return self._refuse(request.method, shown, verdict.reason or "refused", started, verdict.facts)
        if self._failed_reason() is not None:  # another request failed while this one was being read
            return self._refuse(request.method, shown, "the bridge FAILED while this request was validated", started)
        with self._lock:
            if subagent:
                self._subagent_count += 1
            else:
                self._validated += 1
            observe, self._observe_first = self._observe_first, None
        if observe is not None:
            observe(verdict.body)
        facts = dict(verdict.facts)
        outgoing = verdict.body if self._prepare is None else self._prepare(verdict.body, facts)
        reader = self._subagents.reader() if self._subagents is not None else None
        if reader is not None:  # grants the answer's sub-agent calls as they stream to the agent (bridge.subagents)
            request[ANSWER_READER] = reader
        try:
            response, sent, timing = await self._send(request, outgoing, auxiliary=False)
        except UpstreamRefusal as refusal:
            return self._refuse(request.method, shown, str(refusal), started, facts)
        facts.update(sent.facts or {})
        with self._lock:
            if reader is not None and reader.prompts:
                facts["subagent_calls"] = len(reader.prompts)
            if sent.forwarded:
                self._forwarded += 1
            if sent.broken and self._broken is None:
                self._broken = sent.error
                self._broken_timed_out = sent.failure == "timeout"
            self._abandoned = (sent.error or "").startswith(GONE_MID_ANSWER)
            self._count_failure(sent)
        self._record(request.method, shown, "subagent" if subagent else "ok", sent.error, sent.forwarded, sent.status,
                     started, facts, sent.usage, timing)
        return response

    def _count_failure(self, sent: Sent) -> None:
        """Count identical upstream failures in a row (under the lock); at ``max_identical_failures`` the bridge
        stops forwarding: the agent would send the same request again and again (Claude Code resends a 400 up to
        six times, any answer it cannot read too), each one costing an upstream call or an answer deadline."""
        last, count = self._streak
        self._streak = (sent.failure, count + 1 if sent.failure == last else 1)
        self._last_failure = sent.error if sent.failure is not None else None
        self._last_detail = (sent.detail or sent.error) if sent.failure is not None else None
        if sent.failure is not None and self._stopped is None and self._streak[1] >= self._max_identical_failures:
            self._stopped = (f"the model upstream failed {self._streak[1]} times in a row the same way "
                             f"({sent.failure}: {sent.error}); the bridge stopped forwarding")

    async def _send(self, request: web.Request, body: JsonObject, *,
                    auxiliary: bool) -> tuple[web.StreamResponse, Sent, Timing]:
        """Hand a body to the upstream and account for the call (``bridge.accounting``) and, with
        ``--capture-tokens``, its tokens (an upstream that never asked for them: recorded as unavailable)."""
        if self.tokens is not None:
            request[CAPTURE], request[AUXILIARY] = self.tokens, auxiliary
        handed = time.monotonic()
        with self._lock:
            self._upstream_calls += 1
        try:
            response, sent = await self.upstream.send(request, body)
        finally:
            with self._lock:
                self._upstream_calls -= 1
        answered = request.get(ANSWER_STARTED, 0.0)  # None: the bridge sends the (error) answer after the call
        timing = (round((answered - handed) * 1000, 3) if answered >= handed else None,
                  round((time.monotonic() - handed) * 1000, 3))
        with self._lock:
            self._ledger.add(sent.usage, *timing)
        if self.tokens is not None and sent.status < 400 and not sent.broken:  # an answer (not an error) was given
            answer = request.get(ANSWER_TOKENS) or AnswerTokens(
                auxiliary=auxiliary, unavailable=f"the {self.upstream.name} upstream answers no token ids")
            if sent.error is not None:  # e.g. the agent hung up mid-answer: what was read is not the whole answer
                answer.problems.append(f"the answer did not end normally: {sent.error[:200]}")
            self.tokens.finish(answer, sent.usage)
        return response, sent, timing

    async def _auxiliary(self, request: web.Request, shown: str, started: float,
                         verdict: Verdict) -> web.StreamResponse:
        """A helper request (no step, not the first request): forwarded when the gate cleared it, else refused."""
        if not verdict.ok or verdict.body is None:
            return self._refuse(request.method, shown, verdict.reason or "refused", started, verdict.facts)
        try:
            response, sent, timing = await self._send(request, verdict.body, auxiliary=True)
        except UpstreamRefusal as refusal:
            return self._refuse(request.method, shown, str(refusal), started, verdict.facts)
        with self._lock:
            self._auxiliary_count += 1
            if sent.forwarded:
                self._forwarded += 1
            if sent.broken and self._auxiliary_broken is None:
                self._auxiliary_broken = sent.error
        self._record(request.method, shown, "auxiliary", sent.error, sent.forwarded, sent.status, started,
                     {**verdict.facts, **(sent.facts or {})}, sent.usage, timing)
        return response

    async def _count_tokens(self, request: web.Request, shown: str, started: float,
                            reserved: list[int]) -> web.StreamResponse:
        try:
            raw = await self._read_body(request, reserved)
        except ValueError as error:  # not a model request: too large is load, not a gate verdict
            raise Shed(413, str(error)) from None
        self._record(request.method, shown, "local", None, False, 200, started)
        return web.json_response({"input_tokens": math.ceil(len(raw) / 4)})

    def _record(self, method: str, path: str, verdict: str, reason: str | None, forwarded: bool, status: int,
                started: float, facts: dict[str, Any] | None = None,
                usage: dict[str, Any] | None = None, timing: Timing = (None, None)) -> None:
        duration = round((time.monotonic() - started) * 1000, 3)
        with self._lock:
            if len(self._records) >= MAX_RECORDS:  # a flood is counted, not kept (memory and log stay bounded)
                self._unrecorded += 1
                return
            record = RequestRecord(len(self._records) + 1, method, path, verdict, reason, forwarded, status,
                                   duration, dict(facts or {}), usage, *timing)
            self._records.append(record)
            if self._log_handle is not None:
                self._log_handle.write(orjson.dumps(record.to_json()) + b"\n")
                self._log_handle.flush()


async def _answer_started(request: web.Request, response: web.StreamResponse) -> None:
    """The app's response-prepare signal: a time to first byte is measured to here."""
    request[ANSWER_STARTED] = time.monotonic()
