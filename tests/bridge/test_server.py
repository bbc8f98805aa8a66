"""The bridge over real loopback HTTP: token, gate on every request, fail-closed state, upstreams, streaming.

The valid bodies are the REAL first/later requests captured from Claude Code (tests/fixtures/claude_code/requests).
Upstreams are real servers on loopback: ScriptedModel, or a small recording server defined here.
"""

from __future__ import annotations

import asyncio
import copy
import http.client
import json
import math
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from aiohttp import web

from forkpoint.adapters.claude_code.envelope import ExpectedPrefix, expected_prefix
from forkpoint.adapters.claude_code.gate import ClaudeGate, clean_first_request
from forkpoint.bridge.protocols.anthropic import AnthropicStubUpstream, AnthropicUpstream
from forkpoint.bridge.server import Bridge
from forkpoint.core.errors import ErrorKind
from forkpoint.testing import ScriptedModel, text

REQUESTS = Path(__file__).parents[1] / "fixtures" / "claude_code" / "requests"
UPSTREAM_KEY = "sk-upstream-test-key-0001"
AGENT_HEADERS = {"content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": "dummy",
                 "anthropic-beta": "claude-code-20250219", "user-agent": "claude-cli/test", "connection": "keep-alive"}


@dataclass
class Case:
    expected: ExpectedPrefix
    first: dict[str, Any]
    later: dict[str, Any]
    original: dict[str, Any]


def load_case(version: str = "2.1.332", name: str = "parallel_after_2") -> Case:
    case = REQUESTS / version / name
    meta = json.loads((case / "meta.json").read_text("utf-8"))
    records = [json.loads(line) for line in (case / "session.jsonl").read_text("utf-8").splitlines()]
    bodies = [json.loads((case / f"{n}_request.json").read_text("utf-8")) for n in ("first", "later", "original")]
    return Case(expected_prefix(records, meta["nonce"], version), *bodies)


# -- HTTP helpers ----------------------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(url: str, method: str = "POST", body: Any = None, headers: dict[str, str] | None = None,
            raw: bytes | None = None) -> Reply:
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=15)
    try:
        payload = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        connection.request(method, path, body=payload, headers=headers if headers is not None else AGENT_HEADERS)
        response = connection.getresponse()
        return Reply(response.status, {k.lower(): v for k, v in response.getheaders()}, response.read())
    finally:
        connection.close()


def anthropic_bridge(case: Case, upstream_url: str, **kwargs: Any) -> Bridge:
    return Bridge(ClaudeGate(case.expected), AnthropicUpstream(upstream_url, UPSTREAM_KEY), **kwargs)


# -- a recording upstream --------------------------------------------------------------------------------------


@dataclass
class RecordingUpstream:
    """Records every request (headers included) and answers with a chunked SSE stream or a set status."""

    chunks: list[bytes] = field(default_factory=lambda: [b"event: message_start\ndata: {}\n\n",
                                                         b"event: message_stop\ndata: {}\n\n"])
    status: int = 200
    extra_headers: dict[str, str] = field(default_factory=dict)
    hold: threading.Event | None = None  # when set, the stream waits for it after the first chunk
    received: list[dict[str, Any]] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.received.append({"method": request.method, "path": request.path_qs, "headers": dict(request.headers),
                              "body": await request.read()})
        response = web.StreamResponse(status=self.status, headers={"Content-Type": "text/event-stream",
                                                                   **self.extra_headers})
        await response.prepare(request)
        for index, chunk in enumerate(self.chunks):
            await response.write(chunk)
            if index == 0 and self.hold is not None:
                hold = self.hold
                await asyncio.get_running_loop().run_in_executor(None, hold.wait, 10)
        await response.write_eof()
        return response

    @contextmanager
    def serve(self) -> Iterator[str]:
        loop = asyncio.new_event_loop()
        started = threading.Event()
        box: dict[str, Any] = {}

        async def start() -> None:
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self.handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            box["runner"] = runner
            box["url"] = f"http://127.0.0.1:{runner.addresses[0][1]}"

        def run() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(start())
            started.set()
            loop.run_forever()
            loop.run_until_complete(box["runner"].cleanup())
            loop.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        assert started.wait(10)
        try:
            yield str(box["url"])
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)


# -- tests -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", ["2.1.220", "2.1.332"])
def test_valid_first_request_is_forwarded_without_the_envelope(version: str) -> None:
    case = load_case(version)
    upstream = RecordingUpstream()
    with upstream.serve() as upstream_url, anthropic_bridge(case, upstream_url) as bridge:
        reply = request(f"{bridge.base_url}/v1/messages?beta=true", body=case.first)
        assert reply.status == 200, reply.body
        assert reply.headers["content-type"].startswith("text/event-stream")
        assert reply.body == b"".join(upstream.chunks)
        summary = bridge.finish()
    assert len(upstream.received) == 1
    sent = upstream.received[0]
    assert sent["path"] == "/v1/messages?beta=true"
    forwarded = json.loads(sent["body"])
    assert forwarded["messages"] == case.original["messages"]  # the envelope is gone, the cache marker restored
    assert {k: v for k, v in forwarded.items() if k != "messages"} == {
        k: v for k, v in case.first.items() if k != "messages"}
    headers = {k.lower(): v for k, v in sent["headers"].items()}
    assert headers["x-api-key"] == UPSTREAM_KEY
    assert "authorization" not in headers
    assert headers["anthropic-version"] == "2023-06-01" and headers["anthropic-beta"] == "claude-code-20250219"
    assert headers["host"].startswith("127.0.0.1:") and headers["host"] != urlsplit(bridge.base_url).netloc
    assert summary.validated == 1 and summary.forwarded == 1 and summary.error() is None


def test_sse_from_scripted_model_streams_through_unchanged() -> None:
    case = load_case("2.1.332")
    model = ScriptedModel([[text("A long enough answer " * 20)]], step_mode="counter")
    direct_model = ScriptedModel([[text("A long enough answer " * 20)]], step_mode="counter")
    cleaned = clean_first_request(case.expected, case.first)
    assert cleaned.body is not None
    with direct_model.serve() as direct_url:
        direct = request(f"{direct_url}/v1/messages?beta=true", body=cleaned.body)
    with model.serve() as model_url, Bridge(ClaudeGate(case.expected),
                                            AnthropicUpstream(model_url, UPSTREAM_KEY)) as bridge:
        through = request(f"{bridge.base_url}/v1/messages?beta=true", body=case.first)
    assert through.status == direct.status == 200
    assert through.body == direct.body
    assert through.body.count(b"event: content_block_delta") > 3
    assert model.requests[0]["body"] == cleaned.body


def test_response_is_streamed_unbuffered() -> None:
    case = load_case("2.1.332")
    hold = threading.Event()
    upstream = RecordingUpstream(hold=hold)
    with upstream.serve() as upstream_url, anthropic_bridge(case, upstream_url) as bridge:
        parts = urlsplit(bridge.base_url)
        connection = http.client.HTTPConnection("127.0.0.1", parts.port, timeout=15)
        connection.request("POST", f"{parts.path}/v1/messages", body=json.dumps(case.first).encode(),
                           headers=AGENT_HEADERS)
        response = connection.getresponse()
        assert response.status == 200
        first = response.read1(65536)  # arrives while the upstream is still holding the rest
        assert first == upstream.chunks[0]
        assert not hold.is_set()
        hold.set()
        rest = response.read()
        connection.close()
    assert first + rest == b"".join(upstream.chunks)


def test_mutated_request_is_refused_and_nothing_is_forwarded(tmp_path: Path) -> None:
    case = load_case("2.1.220")
    upstream = RecordingUpstream()
    log = tmp_path / "bridge.jsonl"
    tampered = copy.deepcopy(case.first)
    tampered["messages"][3]["content"][0]["content"] = "a different observation"
    with upstream.serve() as upstream_url, Bridge(ClaudeGate(case.expected),
                                                  AnthropicUpstream(upstream_url, UPSTREAM_KEY),
                                                  log_path=log) as bridge:
        reply = request(f"{bridge.base_url}/v1/messages?beta=true", body=tampered)
        assert reply.status == 400
        error = reply.json()
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
        message = error["error"]["message"]
        assert message.startswith("forkpoint bridge refused: conversation message 2 (request messages[3])")
        assert "the observation of toolu_" in message
        # FAILED: even the pristine request is refused now, and count_tokens too
        again = request(f"{bridge.base_url}/v1/messages?beta=true", body=case.first)
        assert again.status == 400 and "FAILED earlier" in again.json()["error"]["message"]
        assert request(f"{bridge.base_url}/v1/messages/count_tokens", body=case.first).status == 400
        token = urlsplit(bridge.base_url).path.strip("/")
        summary = bridge.finish()
    assert upstream.received == []
    assert summary.failed and summary.forwarded == 0 and summary.validated == 0 and summary.refused == 3
    error_obj = summary.error()
    assert error_obj is not None and error_obj.kind is ErrorKind.CONTINUATION
    assert "request messages[3]" in error_obj.message
    logged = log.read_text("utf-8")
    records = [json.loads(line) for line in logged.splitlines()]
    assert [r["verdict"] for r in records] == ["refused", "refused", "refused"]
    assert records[0]["path"] == "/v1/messages?beta=true" and records[0]["forwarded"] is False
    assert set(records[0]) == {"seq", "method", "path", "verdict", "reason", "forwarded", "status", "duration_ms",
                               "facts"}
    for secret in (case.expected.nonce, UPSTREAM_KEY, token, "a different observation", "Run the steps."):
        assert secret not in logged


def test_later_requests_are_validated_and_forwarded() -> None:
    case = load_case("2.1.332", "cd_after_2")
    upstream = RecordingUpstream()
    with upstream.serve() as upstream_url, Bridge(ClaudeGate(case.expected, "Carry on."),
                                                  AnthropicUpstream(upstream_url, UPSTREAM_KEY)) as bridge:
        assert request(f"{bridge.base_url}/v1/messages", body=case.first).status == 200
        assert request(f"{bridge.base_url}/v1/messages", body=case.later).status == 200
        # a later request must carry the same prefix
        tampered = copy.deepcopy(case.later)
        tampered["messages"][2]["content"][1]["input"]["command"] = "rm -rf /"
        assert request(f"{bridge.base_url}/v1/messages", body=tampered).status == 400
        summary = bridge.finish()
    assert len(upstream.received) == 2
    first, later = (json.loads(r["body"]) for r in upstream.received)
    assert first["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": "Carry on.",
                                                                  "cache_control": {"type": "ephemeral"}}]}
    assert later["messages"][len(first["messages"]) - 1] == {"role": "user", "content": "Carry on."}
    assert [m["role"] for m in later["messages"][len(first["messages"]):]] == ["assistant", "user"]
    assert summary.validated == 2 and summary.forwarded == 2 and summary.failed


def test_token_is_required() -> None:
    case = load_case()
    upstream = RecordingUpstream()
    with upstream.serve() as upstream_url, anthropic_bridge(case, upstream_url) as bridge:
        parts = urlsplit(bridge.base_url)
        root = f"http://127.0.0.1:{parts.port}"
        assert request(f"{root}/v1/messages", body=case.first).status == 404
        assert request(f"{root}/wrong-token/v1/messages", body=case.first).status == 404
        assert request(f"{root}{parts.path}x/v1/messages", body=case.first).status == 404
        assert request(f"{root}/api/hello", method="HEAD", headers={}).status == 404
        assert request(f"{bridge.base_url}/api/hello", method="HEAD", headers={}).status == 200
        assert request(f"{bridge.base_url}/", method="GET", headers={}).status == 200
        assert request(f"{bridge.base_url}/v1/other", body={}).status == 404
        summary = bridge.finish()
    assert upstream.received == []
    assert not summary.failed and summary.model_requests == 0
    assert summary.error() is not None  # no model request at all is a continuation failure
    assert all(parts.path.strip("/") not in r.path for r in bridge.records)


def test_stub_upstream_answers_itself() -> None:
    case = load_case("2.1.220")
    with Bridge(ClaudeGate(case.expected), AnthropicStubUpstream("stub says hi")) as bridge:
        streamed = request(f"{bridge.base_url}/v1/messages?beta=true", body=case.first)
        plain = request(f"{bridge.base_url}/v1/messages", body={**case.later, "stream": False})
        summary = bridge.finish()
    assert streamed.status == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in streamed.body.decode().splitlines() if line.startswith("data: ")]
    assert [e["type"] for e in events] == ["message_start", "content_block_start", "content_block_delta",
                                           "content_block_stop", "message_delta", "message_stop"]
    assert events[2]["delta"]["text"] == "stub says hi"
    assert events[4]["delta"]["stop_reason"] == "end_turn"
    message = plain.json()
    assert plain.status == 200 and message["content"] == [{"type": "text", "text": "stub says hi"}]
    assert message["model"] == case.first["model"]
    assert summary.validated == 2 and summary.forwarded == 0 and summary.error() is None


def test_count_tokens_is_answered_locally() -> None:
    case = load_case()
    upstream = RecordingUpstream()
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello"}]}).encode()
    with upstream.serve() as upstream_url, anthropic_bridge(case, upstream_url) as bridge:
        reply = request(f"{bridge.base_url}/v1/messages/count_tokens?beta=true", raw=raw)
        summary = bridge.finish()
    assert reply.status == 200 and reply.json() == {"input_tokens": math.ceil(len(raw) / 4)}
    assert upstream.received == [] and summary.model_requests == 0


def test_upstream_status_and_headers_pass_through() -> None:
    case = load_case()
    upstream = RecordingUpstream(chunks=[b'{"type":"error","error":{"type":"rate_limit_error","message":"slow"}}'],
                                 status=429, extra_headers={"retry-after": "7", "x-secret-upstream": "no"})
    with upstream.serve() as upstream_url, anthropic_bridge(case, upstream_url) as bridge:
        reply = request(f"{bridge.base_url}/v1/messages", body=case.first)
        summary = bridge.finish()
    assert reply.status == 429 and reply.headers["retry-after"] == "7"
    assert "x-secret-upstream" not in reply.headers
    assert reply.json()["error"]["type"] == "rate_limit_error"
    assert summary.forwarded == 1 and not summary.failed


def test_upstream_connection_error_is_502() -> None:
    case = load_case()
    upstream = RecordingUpstream()
    with upstream.serve() as dead_url:
        pass  # the server is gone: its port refuses connections now
    with Bridge(ClaudeGate(case.expected), AnthropicUpstream(dead_url, UPSTREAM_KEY)) as bridge:
        reply = request(f"{bridge.base_url}/v1/messages", body=case.first)
        summary = bridge.finish()
    assert reply.status == 502
    error = reply.json()["error"]
    assert error["type"] == "api_error" and "upstream connection failed" in error["message"]
    assert UPSTREAM_KEY not in reply.body.decode()
    assert summary.validated == 1 and summary.forwarded == 0 and not summary.failed
    assert bridge.records[-1].status == 502


def test_non_json_body_fails_closed() -> None:
    case = load_case()
    with Bridge(ClaudeGate(case.expected), AnthropicStubUpstream()) as bridge:
        reply = request(f"{bridge.base_url}/v1/messages", raw=b"{not json")
        assert reply.status == 400 and "not JSON" in reply.json()["error"]["message"]
        assert request(f"{bridge.base_url}/v1/messages", body=case.first).status == 400
        summary = bridge.finish()
    assert summary.failed and summary.validated == 0


def test_lifecycle_and_repr_hide_secrets() -> None:
    case = load_case()
    upstream = AnthropicUpstream("http://127.0.0.1:9", UPSTREAM_KEY)
    bridge = Bridge(ClaudeGate(case.expected), upstream)
    with pytest.raises(RuntimeError):
        _ = bridge.base_url
    url = bridge.start()
    try:
        token = urlsplit(url).path.strip("/")
        assert len(token) >= 24 and token not in repr(bridge) and UPSTREAM_KEY not in repr(upstream)
        with pytest.raises(RuntimeError):
            bridge.start()
    finally:
        started = time.monotonic()
        bridge.stop()
        bridge.stop()  # idempotent
    assert time.monotonic() - started < 5
    with pytest.raises(ValueError):
        AnthropicUpstream("ftp://x", UPSTREAM_KEY)
    with pytest.raises(ValueError):
        AnthropicUpstream("http://x", "")


def test_step_budget_answers_over_budget_requests_without_forwarding() -> None:
    """Agents without a max-steps option get their budget at the wire: request budget+1 is never forwarded."""
    case = load_case()
    with Bridge(ClaudeGate(case.expected), AnthropicStubUpstream(), max_model_requests=1) as bridge:
        first = request(bridge.base_url + "/v1/messages", body=case.first)
        assert first.status == 200
        over = request(bridge.base_url + "/v1/messages", body=case.later)
        assert over.status == 400 and b"step budget" in over.body
        summary = bridge.finish()
    assert (summary.validated, summary.over_budget, summary.budget_reached) == (1, 1, True)
    assert summary.error() is None  # a reached budget is not a gate failure
    assert [r.verdict for r in bridge.records] == ["ok", "over_budget"]
