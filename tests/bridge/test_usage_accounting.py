"""Usage accounting through a real bridge: each pass-through upstream (Anthropic SSE and JSON, Responses, Chat with
and without include_usage) records what ScriptedModel reported (100 input tokens per call), the summary sums the
calls, and the time to first byte is measured apart from the whole answer. The gate here accepts every body: what
is under test is the bridge's accounting, not a gate."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from tests.bridge.test_server import RecordingUpstream, request

from forkpoint.bridge.gate import Gate, Verdict
from forkpoint.bridge.protocols.anthropic import AnthropicUpstream
from forkpoint.bridge.protocols.openai_chat import OpenAIChatUpstream
from forkpoint.bridge.protocols.openai_responses import OpenAIResponsesUpstream
from forkpoint.bridge.protocols.translating import TranslatingChatUpstream
from forkpoint.bridge.server import Bridge
from forkpoint.bridge.upstream import HttpUpstream
from forkpoint.testing import ScriptedModel, text, tool_use

KEY = "sk-upstream-usage-key-0004"
HEADERS = {"content-type": "application/json", "x-api-key": "dummy", "authorization": "Bearer dummy"}
ROUTES = {"anthropic": "/v1/messages", "responses": "/v1/responses", "chat": "/v1/chat/completions"}


class AcceptingGate(Gate):
    name = "accepting"
    model_routes = frozenset(ROUTES.values())

    def first(self, body: Any) -> Verdict:
        return Verdict(True, body, None)

    def later(self, body: Any) -> Verdict:
        return Verdict(True, body, None)


def upstream_for(protocol: str, url: str) -> HttpUpstream:
    if protocol == "anthropic":
        return AnthropicUpstream(url, KEY)
    if protocol == "responses":
        return OpenAIResponsesUpstream(url + "/v1", KEY)
    return OpenAIChatUpstream(url + "/v1", KEY)


def body_for(protocol: str, stream: bool, include_usage: bool = True) -> dict[str, Any]:
    if protocol == "responses":
        return {"model": "m", "stream": stream, "input": [{"role": "user", "content": "go"}]}
    body: dict[str, Any] = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "go"}]}
    if protocol == "chat" and stream and include_usage:
        body["stream_options"] = {"include_usage": True}
    return body


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("protocol", sorted(ROUTES))
def test_every_pass_through_records_what_the_upstream_reported(protocol: str, stream: bool) -> None:
    model = ScriptedModel([[tool_use("Bash", {"command": "ls"})], [text("done " * 50)]], step_mode="counter")
    with model.serve() as url, Bridge(AcceptingGate(), upstream_for(protocol, url)) as bridge:
        replies = [request(bridge.base_url + ROUTES[protocol], body=body_for(protocol, stream), headers=HEADERS)
                   for _ in range(2)]
        summary = bridge.finish()
    assert [reply.status for reply in replies] == [200, 200]
    records = bridge.records
    assert [r.usage["input_tokens"] if r.usage else None for r in records] == [100, 100]
    assert all(r.usage and r.usage["output_tokens"] >= 10 for r in records)
    usage = summary.model_usage
    assert (usage["calls"], usage["calls_with_usage"], usage["input_tokens"]) == (2, 2, 200)
    assert usage["output_tokens"] == sum(r.usage["output_tokens"] for r in records if r.usage)
    assert all(r.ttfb_ms is not None and r.upstream_ms is not None and 0 <= r.ttfb_ms <= r.upstream_ms
               for r in records)
    assert usage["upstream_ms_total"] == pytest.approx(sum(r.upstream_ms or 0 for r in records), abs=0.01)
    assert usage["ttfb_ms_p50"] is not None and usage["upstream_ms_p50"] is not None
    assert "model_usage" not in summary.to_json()


def test_a_stream_without_usage_is_a_call_without_tokens() -> None:
    model = ScriptedModel([[text("no usage asked")]])
    with model.serve() as url, Bridge(AcceptingGate(), upstream_for("chat", url)) as bridge:
        reply = request(bridge.base_url + ROUTES["chat"], body=body_for("chat", True, include_usage=False),
                        headers=HEADERS)
        summary = bridge.finish()
    assert reply.status == 200 and b'"usage"' not in reply.body
    assert bridge.records[0].usage is None and "usage" not in bridge.records[0].to_json()
    assert (summary.model_usage["calls"], summary.model_usage["calls_with_usage"]) == (1, 0)
    assert summary.model_usage["input_tokens"] == 0


def test_time_to_first_byte_is_the_answers_start_not_its_end(tmp_path: Any) -> None:
    hold = threading.Event()
    chunks = [b'event: message_start\ndata: {"type":"message_start","message":{"usage":{"input_tokens":7,'
              b'"output_tokens":1}}}\n\n',
              b'event: message_delta\ndata: {"type":"message_delta","usage":{"output_tokens":3}}\n\n']
    upstream = RecordingUpstream(chunks=chunks, hold=hold)
    log = tmp_path / "bridge-log.jsonl"
    timer = threading.Timer(0.3, hold.set)
    with upstream.serve() as url, Bridge(AcceptingGate(), AnthropicUpstream(url, KEY), log_path=log) as bridge:
        timer.start()
        reply = request(bridge.base_url + ROUTES["anthropic"], body=body_for("anthropic", True), headers=HEADERS)
        bridge.finish()
    timer.join()
    assert reply.status == 200 and reply.body == b"".join(chunks)
    logged = json.loads(log.read_text("utf-8").splitlines()[0])
    assert logged["usage"] == {"input_tokens": 7, "output_tokens": 3, "cached_tokens": 0, "reasoning_tokens": 0}
    assert logged["upstream_ms"] >= 250 and logged["ttfb_ms"] < logged["upstream_ms"] - 200
    assert KEY not in log.read_text("utf-8")


def test_an_unreachable_upstream_is_a_call_without_usage_or_first_byte() -> None:
    with Bridge(AcceptingGate(), AnthropicUpstream("http://127.0.0.1:9", KEY)) as bridge:
        reply = request(bridge.base_url + ROUTES["anthropic"], body=body_for("anthropic", True), headers=HEADERS)
        summary = bridge.finish()
    record = bridge.records[0]
    assert reply.status == 502 and record.usage is None and record.ttfb_ms is None and record.upstream_ms is not None
    assert summary.model_usage["calls"] == 1 and summary.model_usage["ttfb_ms_p50"] is None


@pytest.mark.parametrize("stream", [True, False])
def test_a_translated_call_records_the_chat_servers_usage(stream: bool) -> None:
    model = ScriptedModel([[tool_use("Bash", {"command": "ls"})]])
    with model.serve() as url, Bridge(AcceptingGate(),
                                      TranslatingChatUpstream("anthropic-messages", url + "/v1", KEY)) as bridge:
        reply = request(bridge.base_url + ROUTES["anthropic"],
                        body={**body_for("anthropic", stream), "max_tokens": 9}, headers=HEADERS)
        summary = bridge.finish()
    assert reply.status == 200
    assert summary.model_usage == {**summary.model_usage, **model.reported_usage()}
    assert (summary.model_usage["calls_with_usage"], summary.model_usage["input_tokens"]) == (1, 100)


def test_a_chat_server_ignoring_include_usage_gives_a_translated_call_without_usage() -> None:
    chunks = [b'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant","content":"hi"},'
              b'"finish_reason":null}]}\n\n',
              b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n']
    upstream = RecordingUpstream(chunks=chunks)
    with upstream.serve() as url, Bridge(AcceptingGate(), TranslatingChatUpstream("anthropic-messages", url + "/v1",
                                                                                  KEY)) as bridge:
        reply = request(bridge.base_url + ROUTES["anthropic"], body=body_for("anthropic", True), headers=HEADERS)
        summary = bridge.finish()
    assert reply.status == 200 and b"message_stop" in reply.body
    assert bridge.records[0].usage is None
    assert (summary.model_usage["calls"], summary.model_usage["calls_with_usage"]) == (1, 0)
