"""The Redactor's held-back tail: exactly the longest end of a chunk that could begin the key; retries of a failure
before the first byte reached the agent, for every native protocol (a real bridge and a real ScriptedModel)."""

from __future__ import annotations

import gzip
import http.client
import http.server
import json
import socket
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkpoint.bridge.gate import Gate, Verdict
from forkpoint.bridge.protocols.anthropic import AnthropicUpstream
from forkpoint.bridge.protocols.openai_chat import OpenAIChatUpstream
from forkpoint.bridge.protocols.openai_responses import OpenAIResponsesUpstream
from forkpoint.bridge.server import Bridge, BridgeSummary, RequestRecord
from forkpoint.bridge.translate.retry import RetryPolicy
from forkpoint.bridge.upstream import NO_RETRIES, REDACTED, HttpUpstream, Redactor
from forkpoint.core.errors import ErrorKind
from forkpoint.testing import ScriptedModel, Turn, text
from forkpoint.testing.script import Fault


def longest_key_start(secret: bytes, tail: bytes) -> int:
    """The definition, one length at a time."""
    return next((size for size in range(min(len(secret) - 1, len(tail)), 0, -1) if tail.endswith(secret[:size])), 0)


@given(st.text("ab-k", max_size=12), st.sampled_from(["abab", "aaaa", "ab-k", "k", "sk-ant-key"]))
def test_held_tail_is_the_longest_end_that_begins_the_key(tail_text: str, secret: str) -> None:
    tail = tail_text.encode()
    assert Redactor(secret)._held(tail) == longest_key_start(secret.encode(), tail)


def test_a_key_split_over_three_chunks_is_redacted_and_a_lookalike_passes() -> None:
    key = "sk-ant-api03-" + "A1b2C3d4" * 12
    redactor = Redactor(key)
    raw = key.encode()
    out = redactor.feed(b"data: x" + raw[:5]) + redactor.feed(raw[5:60]) + redactor.feed(raw[60:] + b" sk-ant-")
    assert out == b"data: x" + REDACTED + b" "  # " sk-ant-" could begin the key: held back
    assert redactor.flush() == b"sk-ant-"


# -- retries: a real bridge on loopback in front of a real ScriptedModel scripted to fail --------------------------

FAST = RetryPolicy(retries=3, base_delay_s=0.01, max_delay_s=0.05)
KEY = "sk-retry-upstream-key-0017"
TOOLS = [{"name": "Bash", "description": "run", "input_schema": {"type": "object"}}]
#: per native protocol: the agent's route, a streamed body with tools (a main request) and the pass-through upstream
NATIVE: dict[str, tuple[str, dict[str, Any], Callable[[str, RetryPolicy], HttpUpstream]]] = {
    "anthropic": ("/v1/messages", {"model": "m", "max_tokens": 64, "stream": True, "tools": TOOLS,
                                   "messages": [{"role": "user", "content": "go"}]},
                  lambda url, policy: AnthropicUpstream(url, KEY, retry=policy)),
    "openai-responses": ("/v1/responses", {"model": "m", "stream": True, "tools": TOOLS, "input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}]},
        lambda url, policy: OpenAIResponsesUpstream(url + "/v1", KEY, retry=policy)),
    "openai-chat": ("/v1/chat/completions", {"model": "m", "stream": True, "tools": TOOLS,
                                             "messages": [{"role": "user", "content": "go"}]},
                    lambda url, policy: OpenAIChatUpstream(url + "/v1", KEY, retry=policy)),
}


class PassGate(Gate):
    name = "pass"
    model_routes = frozenset({"/v1/messages", "/v1/responses", "/v1/chat/completions"})

    def first(self, body: Any) -> Verdict:
        return Verdict(True, body, None)

    def later(self, body: Any) -> Verdict:
        return Verdict(True, body, None)


def post(base: str, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes | None]:
    """Status, headers and body of the bridge's answer; the body is None when the stream broke."""
    parts = urlsplit(base)
    assert parts.hostname is not None
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request("POST", parts.path + path, json.dumps(body), {"content-type": "application/json",
                                                                          "x-api-key": "dummy"})
        response = connection.getresponse()
        try:
            payload: bytes | None = response.read()
        except http.client.IncompleteRead:
            payload = None
        return response.status, dict(response.headers), payload
    finally:
        connection.close()


def relayed_with_summary(protocol: str, faults: list[Fault], policy: RetryPolicy = FAST, log: Path | None = None,
                         ) -> tuple[int, dict[str, str], bytes | None, RequestRecord, ScriptedModel, BridgeSummary]:
    """One agent request through the bridge to a model whose only turn first fails with ``faults``."""
    path, body, build = NATIVE[protocol]
    model = ScriptedModel([Turn((text("recovered answer"),), faults=tuple(faults))])
    with model.serve() as url, Bridge(PassGate(), build(url, policy), log_path=log) as bridge:
        status, headers, payload = post(bridge.base_url, path, body)
        summary = bridge.finish()
        [record] = bridge.records
    return status, headers, payload, record, model, summary


def relayed(protocol: str, faults: list[Fault], policy: RetryPolicy = FAST, log: Path | None = None,
            ) -> tuple[int, dict[str, str], bytes | None, RequestRecord, ScriptedModel]:
    status, headers, payload, record, model, summary = relayed_with_summary(protocol, faults, policy, log)
    assert summary.upstream_broken is None and summary.error() is None  # whatever the agent got was whole
    return status, headers, payload, record, model


RETRY_AFTER_0 = Fault(429, (("Retry-After", "0"),))


@pytest.mark.parametrize("protocol", sorted(NATIVE))
@pytest.mark.parametrize(("fault", "what"), [(RETRY_AFTER_0, {"status": 429}), (Fault(503), {"status": 503}),
                                             (Fault(drop="before_first_byte"), {"error": "ServerDisconnectedError"})],
                         ids=["429-retry-after", "503", "drop-before-first-byte"])
def test_a_failure_before_the_first_byte_is_retried_and_the_agent_sees_only_the_answer(
        protocol: str, fault: Fault, what: dict[str, Any]) -> None:
    status, _, payload, record, model = relayed(protocol, [fault])
    assert status == 200 and payload is not None and b"recovered answer" in payload
    assert [entry.get("fault") for entry in model.requests] == [fault.label, None]
    first, second = record.facts["upstream_attempts"]
    assert {**first, "reason": None, "wait_s": None} == {"attempt": 1, **what, "retry": True, "reason": None,
                                                        "wait_s": None}
    assert 0 <= first["wait_s"] <= FAST.base_delay_s and first["reason"].startswith(
        "HTTP 429: retry 1/3 after Retry-After 0s" if what.get("status") == 429 else
        f"{'HTTP 503' if 'status' in what else 'connection error'}")
    assert second == {"attempt": 2, "status": 200}
    assert (record.status, record.forwarded, record.reason) == (200, True, None)


def test_429_503_and_a_drop_in_a_row_are_each_retried_and_each_attempt_is_in_the_bridge_log(tmp_path: Path) -> None:
    log = tmp_path / "bridge-log.jsonl"
    faults = [RETRY_AFTER_0, Fault(503), Fault(drop="before_first_byte")]
    status, _, payload, record, model = relayed("anthropic", faults, log=log)
    assert status == 200 and payload is not None and b"recovered answer" in payload
    assert len(model.requests) == 4
    [logged] = [json.loads(line) for line in log.read_text().splitlines()]
    attempts = logged["facts"]["upstream_attempts"]
    assert [(a["attempt"], a.get("status"), a.get("error"), a.get("retry")) for a in attempts] == [
        (1, 429, None, True), (2, 503, None, True), (3, None, "ServerDisconnectedError", True), (4, 200, None, None)]
    assert [a["reason"].split(":")[0] for a in attempts[:3]] == ["HTTP 429", "HTTP 503", "connection error (Server"
                                                                 "DisconnectedError)"]
    assert attempts[1]["wait_s"] <= FAST.base_delay_s * 2 and attempts[2]["wait_s"] <= FAST.base_delay_s * 4
    text_of_log = log.read_text()
    assert KEY not in text_of_log and "recovered answer" not in text_of_log and "scripted HTTP" not in text_of_log
    assert record.facts == logged["facts"]


@pytest.mark.parametrize("protocol", sorted(NATIVE))
def test_when_the_retries_are_spent_the_agent_gets_the_upstreams_last_error(protocol: str) -> None:
    policy = RetryPolicy(retries=2, base_delay_s=0.01, max_delay_s=0.02)
    status, headers, payload, record, model = relayed(protocol, [Fault(503)] * 2 + [RETRY_AFTER_0], policy)
    assert status == 429 and headers.get("Retry-After") == "0" and payload is not None
    assert b"ScriptedModel: scripted HTTP 429" in payload  # the upstream's own error body, relayed
    assert len(model.requests) == 3
    attempts = record.facts["upstream_attempts"]
    assert [(a["status"], a["retry"]) for a in attempts] == [(503, True), (503, True), (429, False)]
    assert attempts[-1]["reason"] == "HTTP 429: no retries left (2 allowed)"
    assert (record.status, record.forwarded) == (429, True)


def test_connection_errors_past_the_retries_answer_502_and_a_4xx_is_never_retried() -> None:
    drops = [Fault(drop="before_first_byte")] * 2
    status, _, payload, record, model = relayed("anthropic", drops, RetryPolicy(retries=1, base_delay_s=0.01))
    assert status == 502 and payload is not None and b"upstream connection failed" in payload
    assert len(model.requests) == 2 and not record.forwarded
    assert [a["retry"] for a in record.facts["upstream_attempts"]] == [True, False]
    status, _, _, record, model = relayed("openai-chat", [Fault(400)])
    assert status == 400 and len(model.requests) == 1
    assert record.facts["upstream_attempts"] == [{"attempt": 1, "status": 400, "retry": False, "wait_s": 0.0,
                                                  "reason": "HTTP 400: not a transient failure"}]


@pytest.mark.parametrize("protocol", sorted(NATIVE))
def test_after_the_first_byte_reached_the_agent_nothing_is_retried(protocol: str) -> None:
    status, _, payload, record, model, summary = relayed_with_summary(protocol, [Fault(drop="after_first_byte")])
    assert status == 200 and payload is None  # the agent saw the answer begin and break
    assert [entry.get("fault") for entry in model.requests] == ["drop after_first_byte"]
    assert record.reason is not None and record.reason.startswith("upstream stream broke")
    assert "upstream_attempts" not in record.facts  # one attempt, and its answer was relayed
    assert summary.upstream_broken == record.reason and summary.forwarded == 1
    error = summary.error()
    assert error is not None and error.kind is ErrorKind.MODEL_CONNECTION and error.kind.retryable
    assert error.kind.exit_code == 40 and "after its first byte reached the agent" in error.message


def test_an_upstream_built_without_a_policy_calls_once() -> None:
    status, _, _, record, model = relayed("anthropic", [Fault(503)], NO_RETRIES)
    assert status == 503 and len(model.requests) == 1
    assert record.facts["upstream_attempts"][0]["reason"] == "HTTP 503: no retries left (0 allowed)"


def test_an_agent_that_hangs_up_mid_answer_is_not_an_upstream_failure() -> None:
    """The agent's own choice (an aborted stream) is recorded as such and fails nothing."""
    path, body, build = NATIVE["anthropic"]
    model = ScriptedModel([[text("x" * 4_000_000)]])
    with model.serve() as url, Bridge(PassGate(), build(url, FAST)) as bridge:
        parts = urlsplit(bridge.base_url)
        assert parts.hostname is not None
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        connection.request("POST", parts.path + path, json.dumps(body), {"content-type": "application/json"})
        response = connection.getresponse()
        assert response.status == 200 and response.read(100)
        connection.close()
        deadline = time.monotonic() + 10
        while not bridge.records and time.monotonic() < deadline:
            time.sleep(0.02)
        summary = bridge.finish()
        [record] = bridge.records
    assert record.reason is not None and record.reason.startswith("the agent closed the connection mid-answer")
    assert summary.upstream_broken is None and summary.error() is None


class _HoldsTheEnd(http.server.BaseHTTPRequestHandler):
    """A model server that sends its whole answer, then waits before the chunked stream's terminating chunk."""

    protocol_version = "HTTP/1.1"
    answer = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(self.answer), self.answer))
        self.wfile.flush()
        time.sleep(0.5)  # the agent has read the final event and hung up by now
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, *args: Any) -> None:
        pass


def test_an_agent_that_hangs_up_after_the_final_event_got_the_answer_and_it_counts_as_forwarded() -> None:
    """Seen in CI with codex 0.171: the agent closes as soon as it has read the final event, before the stream's
    end; writing the end then fails. Before the fix the bridge's handler raised, the request was never recorded
    and ``forwarded`` fell one short of ``validated``."""
    path, body, build = NATIVE["anthropic"]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _HoldsTheEnd)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with Bridge(PassGate(), build(f"http://127.0.0.1:{server.server_port}", FAST)) as bridge:
            parts = urlsplit(bridge.base_url)
            with socket.create_connection((parts.hostname, parts.port), timeout=10) as agent:
                payload = json.dumps(body).encode()
                agent.sendall(b"POST %s HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                              b"content-length: %d\r\n\r\n%s" % ((parts.path + path).encode(), len(payload), payload))
                seen = b""
                while b"message_stop" not in seen.split(b"\r\n\r\n", 1)[-1]:
                    piece = agent.recv(65536)
                    assert piece, seen
                    seen += piece
            deadline = time.monotonic() + 10
            while not bridge.records and time.monotonic() < deadline:
                time.sleep(0.02)
            summary = bridge.finish()
            records = list(bridge.records)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert [record.verdict for record in records] == ["ok"], records
    [record] = records
    assert record.forwarded and record.status == 200
    assert record.reason is not None and record.reason.startswith("the agent closed the connection before the answer")
    assert summary.validated == summary.forwarded == 1 and summary.error() is None and summary.upstream_broken is None


class HelperGate(PassGate):
    """Every request is a helper request (as an agent's title generation is)."""

    def auxiliary(self, body: Any) -> Verdict | None:
        return Verdict(True, body, None)


def test_a_helper_answer_that_breaks_after_its_first_byte_is_recorded_but_fails_nothing() -> None:
    """Before: the break of a helper's answer was in its request record only, nowhere in the run's metadata."""
    path, body, build = NATIVE["anthropic"]
    model = ScriptedModel([Turn((text("a title"),), faults=(Fault(drop="after_first_byte"),))])
    with model.serve() as url, Bridge(HelperGate(), build(url, FAST)) as bridge:
        status, _, payload = post(bridge.base_url, path, body)
        summary = bridge.finish()
    assert status == 200 and payload is None  # the agent saw the helper's answer break
    assert summary.auxiliary == 1 and summary.upstream_broken is None
    assert summary.auxiliary_broken is not None and summary.auxiliary_broken.startswith("upstream stream broke")
    assert summary.to_json()["auxiliary_broken"] == summary.auxiliary_broken


# -- hostile upstreams (issue 27): deadlines, answers that are not the protocol's, identical failures -----------------


@pytest.mark.parametrize(("first", "fits"), [
    (b"event: message_start\n", True), (b"ev", True), (b"data: {}\n\n", True), (b": keep-alive\n\n", True),
    (b"\n\nid: 1\n", True), (b'{"id": "x"}', True), (b"", True), (b"<html><body>", False),
    (b"\x00\x01garbage", False), (b"Internal Server Error", False)])
def test_looks_like_answer_accepts_sse_and_json_beginnings_only(first: bytes, fits: bool) -> None:
    from forkpoint.bridge.upstream import looks_like_answer

    assert looks_like_answer(first) is fits


class _Hostile(http.server.BaseHTTPRequestHandler):
    """``server.mode``: ``html400``, ``garbage``, ``drip`` (a comment every 0.05 s until the client leaves) or
    ``silence`` (headers and one event, then nothing until the client leaves)."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        server: Any = self.server
        server.count += 1
        if server.mode == "html400":
            self._send(400, "text/html", b"<html><body><h1>400 Bad Request</h1></body></html>")
            return
        if server.mode == "garbage":
            self._send(200, "application/json", b"certainly not json")
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b"event: ping\ndata: {\"type\": \"ping\"}\n\n")
        self.wfile.flush()
        try:
            while not server.done.wait(0.05):
                if server.mode == "drip":
                    self.wfile.write(b": keep-alive\n\n")
                    self.wfile.flush()
        except OSError:  # the bridge cut the answer
            return

    def _send(self, status: int, kind: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("content-type", kind)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return None


def hostile(mode: str, requests: int, **upstream: Any) -> tuple[list[tuple[int, bytes | None]], BridgeSummary,
                                                                list[RequestRecord], int]:
    """``requests`` agent requests through a real bridge to a real hostile HTTP server: the answers, the summary,
    the records and how many requests reached the server."""
    server: Any = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hostile)
    server.mode, server.count, server.done = mode, 0, threading.Event()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    path, body, _ = NATIVE["anthropic"]
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with Bridge(PassGate(), AnthropicUpstream(url, KEY, **upstream)) as bridge:
            answers = [post(bridge.base_url, path, body)[::2] for _ in range(requests)]
            summary = bridge.finish()
            records = bridge.records
        return answers, summary, records, server.count
    finally:
        server.done.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


@pytest.mark.parametrize(("mode", "kind", "category"), [("html400", "http_400", ErrorKind.CONTINUATION),
                                                        ("garbage", "invalid_answer", ErrorKind.MODEL_INTERNAL)])
def test_a_deterministic_failure_reaches_the_agent_non_retryable_and_stops_after_three(
        mode: str, kind: str, category: ErrorKind) -> None:
    answers, summary, records, reached = hostile(mode, 5)
    assert reached == 3  # the 4th and 5th identical requests never left the bridge
    for status, payload in answers:
        assert status == 400 and payload is not None
        error = json.loads(payload)
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error", error
    if mode == "html400":  # re-shaped into Anthropic's error: the page's text is its message
        assert "upstream HTTP 400" in json.loads(answers[0][1] or b"{}")["error"]["message"]
    assert [record.verdict for record in records] == ["ok"] * 3 + ["stopped"] * 2
    assert (summary.upstream_failure, summary.upstream_stopped is not None) == (kind, True)
    error = summary.error()
    assert error is not None and error.kind is category and "3 times in a row" in error.message


@pytest.mark.parametrize(("mode", "options", "flag"), [
    ("drip", {"answer_timeout_s": 0.5}, "--answer-timeout"),
    ("silence", {"read_timeout_s": 0.5}, "--upstream-idle-timeout")])
def test_an_answer_that_never_ends_is_cut_and_fails_as_a_model_timeout(mode: str, options: dict[str, float],
                                                                       flag: str) -> None:
    started = time.monotonic()
    answers, summary, records, reached = hostile(mode, 1, **options)
    assert time.monotonic() - started < 30  # the old bridge waited 600 s of silence, and a drip forever
    assert reached == 1 and answers[0][1] is None  # the agent's stream was cut, not cleanly ended
    assert records[0].reason is not None and records[0].reason.startswith("upstream timed out") and flag in \
        records[0].reason
    error = summary.error()
    assert error is not None and error.kind is ErrorKind.MODEL_TIMEOUT and error.kind.retryable


class _Compressing(http.server.BaseHTTPRequestHandler):
    """A model server that compresses its answer although the bridge asked for identity, quoting the key it got:
    compressed, the key would pass the byte redactor unseen and the agent would inflate it."""

    protocol_version = "HTTP/1.1"
    encoding = "gzip"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["content-length"]))
        key = (self.headers.get("x-api-key") or self.headers.get("authorization") or "").encode()
        answer = b'event: error\ndata: {"type":"error","error":{"type":"invalid_request_error","message":"bad key ' \
            + key + b'"}}\n\n'
        body = gzip.compress(answer) if self.encoding == "gzip" else zlib.compress(answer) \
            if self.encoding == "deflate" else b"\x0b" + answer  # "br": bytes the bridge cannot read
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-encoding", self.encoding)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("protocol", sorted(NATIVE))
@pytest.mark.parametrize("encoding", ["gzip", "deflate", "br"])
def test_a_compressed_answer_quoting_the_key_is_decoded_and_redacted_or_refused(protocol: str, encoding: str) -> None:
    path, body, build = NATIVE[protocol]
    handler = type("Handler", (_Compressing,), {"encoding": encoding})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with Bridge(PassGate(), build(f"http://127.0.0.1:{server.server_port}", NO_RETRIES)) as bridge:
            status, headers, payload = post(bridge.base_url, path, body)
            bridge.finish()
            [record] = bridge.records
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert payload is not None and KEY.encode() not in payload
    if encoding == "br":  # a coding the redactor cannot read: refused, not passed on unread
        assert status == 502 and b"cannot be checked for the upstream key" in payload and record.status == 502
    else:
        assert status == 200 and "content-encoding" not in {name.lower() for name in headers}
        assert b"bad key " in payload and REDACTED in payload and record.forwarded
