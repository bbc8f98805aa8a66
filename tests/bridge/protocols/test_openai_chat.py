"""The bridge on the OpenAI Chat Completions side: OpenAIChatUpstream / ChatStubUpstream and helper requests.

The upstream is a real ScriptedModel on loopback. The gate here is a small prefix-equality gate written for the
test (each Chat Completions agent ships its own gate); what is under test is the bridge: routing, the
``auxiliary`` path (helper requests forwarded without counting as steps), budgets and the stub.
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any
from urllib.parse import urlsplit

import pytest

from forkpoint.bridge.gate import Gate, Verdict
from forkpoint.bridge.protocols.openai_chat import ChatStubUpstream, OpenAIChatUpstream
from forkpoint.bridge.server import Bridge
from forkpoint.testing import ScriptedModel, text, tool_use

KEY = "sk-upstream-chat-key-0003"
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
PREFIX = [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}]


class PrefixGate(Gate):
    """First request's messages must start with PREFIX; requests without tools are helpers."""

    name = "test-chat"
    model_routes = frozenset({"/v1/chat/completions", "/chat/completions"})

    def first(self, body: Any) -> Verdict:
        if body.get("messages", [])[:len(PREFIX)] != PREFIX:
            return Verdict(False, None, "the prefix differs")
        return Verdict(True, body, None)

    def later(self, body: Any) -> Verdict:
        return Verdict(True, body, None)

    def auxiliary(self, body: Any) -> Verdict | None:
        return None if body.get("tools") else Verdict(True, body, None)


def post(base: str, path: str, body: dict[str, Any]) -> tuple[int, str]:
    parts = urlsplit(base)
    assert parts.hostname is not None
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    connection.request("POST", parts.path + path, json.dumps(body),
                       {"content-type": "application/json", "authorization": "Bearer dummy-agent-key"})
    response = connection.getresponse()
    payload = response.read().decode()
    connection.close()
    return response.status, payload


def test_auxiliary_verdict_is_none_for_gates_without_the_hook() -> None:
    class Plain(Gate):
        name = "plain"
        model_routes = frozenset({"/x"})

        def first(self, body: Any) -> Verdict:
            return Verdict(True, body, None)

        def later(self, body: Any) -> Verdict:
            return Verdict(True, body, None)

    assert Plain().auxiliary({}) is None
    assert PrefixGate().auxiliary({"messages": []}) == Verdict(True, {"messages": []}, None)
    assert PrefixGate().auxiliary({"tools": TOOLS}) is None


def test_chat_requests_pass_through_with_the_bridge_key_and_helpers_do_not_count() -> None:
    model = ScriptedModel([[tool_use("bash", {"command": "ls"})]])
    with model.serve() as url, Bridge(PrefixGate(), OpenAIChatUpstream(url + "/v1", KEY),
                                      max_model_requests=1) as bridge:
        title_status, title = post(bridge.base_url, "/v1/chat/completions",
                                   {"messages": [{"role": "user", "content": "Generate a title"}]})
        status, answer = post(bridge.base_url, "/v1/chat/completions",
                              {"messages": PREFIX, "tools": TOOLS, "stream": True})
        over_status, _ = post(bridge.base_url, "/v1/chat/completions", {"messages": PREFIX, "tools": TOOLS})
        summary = bridge.finish()
    assert title_status == 200 and json.loads(title)["choices"][0]["message"]["content"] == "Scripted helper answer"
    assert status == 200 and '"name": "bash"' in answer and answer.rstrip().endswith("data: [DONE]")
    assert over_status == 400  # the one step of the budget was used by the tool request, not by the title
    assert (summary.auxiliary, summary.validated, summary.forwarded, summary.over_budget) == (1, 1, 2, 1)
    assert [entry["path"] for entry in model.requests] == ["/v1/chat/completions"] * 2
    assert all("authorization" not in entry["headers"] for entry in model.requests)


def test_a_refused_first_request_forwards_nothing_and_fails_the_bridge() -> None:
    model = ScriptedModel([[text("never")]])
    with model.serve() as url, Bridge(PrefixGate(), OpenAIChatUpstream(url, KEY)) as bridge:
        status, body = post(bridge.base_url, "/chat/completions",
                            {"messages": [{"role": "user", "content": "other"}], "tools": TOOLS})
        title_status, _ = post(bridge.base_url, "/chat/completions", {"messages": []})
        summary = bridge.finish()
    assert status == 400 and "the prefix differs" in body
    assert title_status == 400  # FAILED: even helper requests are refused now
    assert model.requests == [] and summary.failed and summary.forwarded == 0


@pytest.mark.parametrize("stream", [False, True])
def test_chat_stub_answers_itself(stream: bool) -> None:
    with Bridge(PrefixGate(), ChatStubUpstream("stubbed")) as bridge:
        status, body = post(bridge.base_url, "/v1/chat/completions",
                            {"model": "m", "messages": PREFIX, "tools": TOOLS, "stream": stream,
                             "stream_options": {"include_usage": True}})
        summary = bridge.finish()
    assert status == 200 and summary.validated == 1 and summary.forwarded == 0
    if stream:
        chunks = [json.loads(line[6:]) for line in body.split("\n\n") if line.startswith("data: {")]
        assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == "stubbed"
        assert chunks[-1]["usage"]["total_tokens"] == 1 and body.rstrip().endswith("data: [DONE]")
    else:
        assert json.loads(body)["choices"][0]["message"]["content"] == "stubbed"


def test_upstream_url_and_key_rules() -> None:
    assert OpenAIChatUpstream("http://127.0.0.1:1/v1", KEY).url == "http://127.0.0.1:1/v1/chat/completions"
    assert OpenAIChatUpstream("http://h/v1/chat/completions/", KEY).url == "http://h/v1/chat/completions"
    assert KEY not in repr(OpenAIChatUpstream("http://h/v1", KEY))
    with pytest.raises(ValueError, match="openai-chat upstream needs an API key"):
        OpenAIChatUpstream("http://h", "")
    with pytest.raises(ValueError):
        OpenAIChatUpstream("ftp://h", KEY)


def test_stop_twice_while_an_upstream_stream_stalls_shuts_down_cleanly() -> None:
    """finish() inside ``with bridge:`` stops twice; the second stop must not cut the first one's shutdown."""
    import threading

    model = ScriptedModel([{"content": [text("never sent")], "stall": True}])
    errors: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: errors.append(args.exc_value or RuntimeError("thread failed"))
    try:
        with model.serve() as url, Bridge(PrefixGate(), OpenAIChatUpstream(url, KEY)) as bridge:
            parts = urlsplit(bridge.base_url)
            assert parts.hostname is not None
            connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
            connection.request("POST", parts.path + "/v1/chat/completions",
                               json.dumps({"messages": PREFIX, "tools": TOOLS, "stream": True}),
                               {"content-type": "application/json"})
            # the upstream's headers arrive, then nothing: the bridge holds the agent's answer until a first byte
            # (to judge it: bridge.upstream.looks_like_answer), so wait until the upstream has the request
            deadline = time.monotonic() + 30
            while not model.requests and time.monotonic() < deadline:
                time.sleep(0.01)
            assert model.requests
            summary = bridge.finish()
        connection.close()
    finally:
        threading.excepthook = previous
    assert errors == []
    assert summary.validated == 1 and not bridge._serving.alive
