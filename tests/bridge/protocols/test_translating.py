"""Translating upstreams: Claude Code's Anthropic Messages, Codex's Responses and Gemini CLI's Gemini API answered
by a Chat Completions server (a real ScriptedModel on loopback). A pass-all gate; what is under test is the
upstream: the translated request, the streamed translated answer, refusals, losses and usage in the record."""

from __future__ import annotations

import http.client
import json
from typing import Any
from urllib.parse import urlsplit

import pytest
from tests.bridge.translate.conftest import check_chat_request

from forkpoint.bridge.gate import Gate, Verdict
from forkpoint.bridge.protocols import make_upstream
from forkpoint.bridge.protocols.anthropic import AnthropicStubUpstream
from forkpoint.bridge.protocols.translating import TranslatingChatUpstream
from forkpoint.bridge.server import Bridge
from forkpoint.bridge.translate.retry import RetryPolicy
from forkpoint.core.errors import ErrorKind
from forkpoint.testing import ScriptedModel, Turn, text, tool_use
from forkpoint.testing.scripted_model import Fault

KEY = "sk-translating-key-0004"
ANTHROPIC_BODY: dict[str, Any] = {
    "model": "claude-x", "max_tokens": 256, "stream": True, "system": "be brief",
    "messages": [{"role": "user", "content": "list files"}],
    "tools": [{"name": "Bash", "description": "run", "input_schema": {"type": "object",
                                                                       "properties": {"command": {"type": "string"}}}}],
}
RESPONSES_BODY: dict[str, Any] = {
    "model": "gpt-x", "stream": True, "instructions": "be brief",
    "input": [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]}],
    "tools": [{"type": "function", "name": "shell", "description": "run", "strict": False,
               "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}],
}


class PassGate(Gate):
    name = "pass"
    model_routes = frozenset({"/v1/messages", "/v1/responses", "/responses", "/v1beta/models/gemini-x:generateContent",
                              "/v1beta/models/gemini-x:streamGenerateContent"})

    def first(self, body: Any) -> Verdict:
        return Verdict(True, body, None)

    def later(self, body: Any) -> Verdict:
        return Verdict(True, body, None)
#: the record keeps the --upstream names (result documents' strings did not change with the protocol registry)
TRANSLATED = {"anthropic-messages": "anthropic -> openai-chat",
              "openai-responses": "openai-responses -> openai-chat"}


def post(base: str, path: str, body: dict[str, Any]) -> tuple[int, str]:
    parts = urlsplit(base)
    assert parts.hostname is not None
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    connection.request("POST", parts.path + path, json.dumps(body), {"content-type": "application/json",
                                                                      "x-api-key": "dummy", "anthropic-beta": "b"})
    response = connection.getresponse()
    payload = response.read().decode()
    connection.close()
    return response.status, payload


def events(stream: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in stream.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines:
            out.append((lines.get("event", ""), json.loads(lines["data"])))
    return out


def test_the_registry_builds_translating_upstreams_and_keeps_each_agents_stub() -> None:
    claude = make_upstream("anthropic-messages", "openai-chat", "http://127.0.0.1:9/v1", KEY)
    codex = make_upstream("openai-responses", "openai-chat", None, KEY)
    assert isinstance(claude, TranslatingChatUpstream) and claude.agent == "anthropic-messages"
    assert claude.url == "http://127.0.0.1:9/v1/chat/completions" and KEY not in repr(claude)
    assert isinstance(codex, TranslatingChatUpstream) and codex.agent == "openai-responses"
    assert isinstance(make_upstream("anthropic-messages", "stub", None, None), AnthropicStubUpstream)


@pytest.mark.parametrize(("path", "body", "agent"), [("/v1/messages", ANTHROPIC_BODY, "anthropic-messages"),
                                                     ("/v1/responses", RESPONSES_BODY, "openai-responses")])
def test_an_agent_request_is_answered_by_a_chat_server_streamed_and_translated(path: str, body: dict[str, Any],
                                                                                 agent: str) -> None:
    model = ScriptedModel([[text("running"), tool_use("Bash" if agent == "anthropic-messages" else "shell",
                                                       {"command": "ls"})]])
    with model.serve() as url, Bridge(PassGate(), TranslatingChatUpstream(agent, url + "/v1", KEY)) as bridge:
        status, answer = post(bridge.base_url, path, body)
        summary = bridge.finish()
        record = bridge.records[-1]
    assert status == 200 and summary.forwarded == 1 and not summary.failed
    [sent] = model.requests
    assert sent["path"] == "/v1/chat/completions"
    check_chat_request(sent["body"])
    assert sent["headers"].get("authorization") is None  # ScriptedModel never keeps the key
    assert "anthropic-beta" not in {name.lower() for name in sent["headers"]}
    names = [name for name, _ in events(answer)]
    if agent == "anthropic-messages":
        assert names[0] == "message_start" and names[-1] == "message_stop"
        uses = [d["content_block"] for n, d in events(answer) if n == "content_block_start"
                and d["content_block"]["type"] == "tool_use"]
        assert [u["name"] for u in uses] == ["Bash"]
    else:
        assert names[0] == "response.created" and names[-1] == "response.completed"
        done = [d["item"] for n, d in events(answer) if n == "response.output_item.done"]
        assert any(item["type"] == "function_call" and item["name"] == "shell" for item in done)
    assert record.facts["translated"] == TRANSLATED[agent] and isinstance(record.facts["losses"], list)
    assert record.usage is not None and record.usage["input_tokens"] == 100 and record.usage["output_tokens"] > 0


GEMINI_BODY: dict[str, Any] = {
    "contents": [{"role": "user", "parts": [{"text": "list files"}]}],
    "systemInstruction": {"parts": [{"text": "be brief"}]},
    "tools": [{"functionDeclarations": [{"name": "run_shell_command", "description": "run",
                                         "parametersJsonSchema": {"type": "object"}}]}],
}


@pytest.mark.parametrize(("method", "stream"), [("streamGenerateContent?alt=sse", True), ("generateContent", False)])
def test_a_gemini_request_takes_its_model_and_stream_from_the_route(method: str, stream: bool) -> None:
    """The Gemini API carries the model and the streaming choice in the path: the translated Chat request has them
    (the path under the bridge token, query cut), and the answer comes back as Gemini chunks or one response."""
    model = ScriptedModel([[text("running"), tool_use("run_shell_command", {"command": "ls"})]])
    with model.serve() as url, Bridge(PassGate(), TranslatingChatUpstream("google-generate-content", url + "/v1",
                                                                          KEY)) as bridge:
        status, answer = post(bridge.base_url, f"/v1beta/models/gemini-x:{method}", GEMINI_BODY)
        bridge.finish()  # the request's record is written once the answer is over
        record = bridge.records[-1]
    assert status == 200, answer
    [sent] = model.requests
    check_chat_request(sent["body"])
    assert sent["body"]["model"] == "gemini-x" and bool(sent["body"].get("stream")) is stream
    chunks = [data for _, data in events(answer)] if stream else [json.loads(answer)]
    parts = [part for chunk in chunks for part in chunk["candidates"][0]["content"]["parts"]]
    assert {"functionCall": {"name": "run_shell_command", "args": {"command": "ls"},
                             "id": parts[-1]["functionCall"]["id"]}} == parts[-1]
    assert "".join(p.get("text", "") for p in parts) == "running"
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP" and chunks[-1]["usageMetadata"]["promptTokenCount"]
    assert record.facts["translated"] == "gemini -> openai-chat"


def test_an_untranslatable_request_is_refused_before_anything_leaves_the_bridge() -> None:
    model = ScriptedModel([[text("never")]])
    hostile = {**ANTHROPIC_BODY, "messages": [{"role": "user", "content": [{"type": "mystery", "x": 1}]}]}
    with model.serve() as url, Bridge(PassGate(), TranslatingChatUpstream("anthropic-messages", url, KEY)) as bridge:
        status, answer = post(bridge.base_url, "/v1/messages", hostile)
        summary = bridge.finish()
    assert status == 400 and "cannot be translated" in answer
    assert model.requests == [] and summary.failed and summary.refused == 1 and summary.forwarded == 0


def test_a_non_streamed_request_and_an_upstream_error_are_in_the_agents_protocol() -> None:
    model = ScriptedModel([[text("whole answer")]])
    with model.serve() as url, Bridge(PassGate(), TranslatingChatUpstream("anthropic-messages", url, KEY)) as bridge:
        status, answer = post(bridge.base_url, "/v1/messages", {**ANTHROPIC_BODY, "stream": False})
        bridge.finish()
    assert status == 200 and json.loads(answer)["content"][0] == {"type": "text", "text": "whole answer"}
    with Bridge(PassGate(), TranslatingChatUpstream("anthropic-messages", "http://127.0.0.1:9", KEY)) as bridge:
        status, answer = post(bridge.base_url, "/v1/messages", ANTHROPIC_BODY)
        bridge.finish()
    assert status == 502 and json.loads(answer)["type"] == "error" and KEY not in answer


FAST = RetryPolicy(retries=3, base_delay_s=0.01, max_delay_s=0.05)


@pytest.mark.parametrize(("path", "body", "agent"), [("/v1/messages", ANTHROPIC_BODY, "anthropic-messages"),
                                                     ("/v1/responses", RESPONSES_BODY, "openai-responses")])
def test_chat_server_failures_before_the_first_byte_are_retried_before_translating(
        path: str, body: dict[str, Any], agent: str) -> None:
    faults = (Fault(429, (("retry-after-ms", "5"),)), Fault(503), Fault(drop="before_first_byte"))
    model = ScriptedModel([Turn((text("after retries."),), faults=faults)])
    upstream = make_upstream(agent, "openai-chat",
                             None, KEY, retry=FAST)
    assert isinstance(upstream, TranslatingChatUpstream) and upstream.retry == FAST
    with model.serve() as url, Bridge(PassGate(), TranslatingChatUpstream(agent, url, KEY, retry=FAST)) as bridge:
        status, answer = post(bridge.base_url, path, body)
        summary = bridge.finish()
        [record] = bridge.records
    assert status == 200 and "after retries" in answer and summary.error() is None
    assert [entry.get("fault") for entry in model.requests] == [fault.label for fault in faults] + [None]
    attempts = record.facts["upstream_attempts"]
    assert [(a.get("status"), a.get("error"), a.get("retry")) for a in attempts] == [
        (429, None, True), (503, None, True), (None, "ServerDisconnectedError", True), (200, None, None)]
    assert attempts[0]["wait_s"] == 0.005 and attempts[0]["reason"].endswith("after Retry-After 0.005s")
    assert record.facts["translated"] == TRANSLATED[agent] and record.usage is not None


def test_spent_retries_give_the_agent_the_chat_servers_error_in_its_own_protocol() -> None:
    model = ScriptedModel([Turn((text("never"),), faults=(Fault(503), Fault(429, (("Retry-After", "0"),))))])
    once = RetryPolicy(retries=1, base_delay_s=0.01)
    with model.serve() as url, Bridge(PassGate(), TranslatingChatUpstream("anthropic-messages", url, KEY,
                                                                          retry=once)) as bridge:
        status, answer = post(bridge.base_url, "/v1/messages", ANTHROPIC_BODY)
        [record] = bridge.records
    error = json.loads(answer)
    assert status == 429 and error["error"]["type"] == "rate_limit_error" and "scripted HTTP 429" in answer
    assert [(a["status"], a["retry"]) for a in record.facts["upstream_attempts"]] == [(503, True), (429, False)]
    assert len(model.requests) == 2


def test_a_chat_stream_that_breaks_after_the_first_byte_is_cut_for_the_agent_and_not_retried() -> None:
    model = ScriptedModel([Turn((text("a long answer " * 20),), faults=(Fault(drop="after_first_byte"),))])
    with model.serve() as url, Bridge(PassGate(), TranslatingChatUpstream("anthropic-messages", url + "/v1", KEY,
                                                                            retry=FAST)) as bridge:
        with pytest.raises(http.client.IncompleteRead):
            post(bridge.base_url, "/v1/messages", ANTHROPIC_BODY)
        summary = bridge.finish()
    assert len(model.requests) == 1 and summary.upstream_broken is not None
    error = summary.error()
    assert error is not None and error.kind is ErrorKind.MODEL_CONNECTION and error.kind.retryable


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize(("path", "body", "agent"), [("/v1/messages", ANTHROPIC_BODY, "anthropic-messages"),
                                                     ("/v1/responses", RESPONSES_BODY, "openai-responses")])
def test_a_chat_answer_quoting_the_key_reaches_the_agent_redacted(
        path: str, body: dict[str, Any], agent: str, stream: bool) -> None:
    """The model server quotes the bridge's key (the 48-character deltas cut it in two); the agent gets the answer
    with the key replaced, streamed or whole, and the request's record does not hold it either."""
    said = f"{'x' * 40} Authorization: Bearer {KEY} (twice: {KEY})"
    model = ScriptedModel([Turn((text(said),))])
    with model.serve() as url, Bridge(PassGate(), TranslatingChatUpstream(agent, url, KEY)) as bridge:
        status, answer = post(bridge.base_url, path, {**body, "stream": stream})
        bridge.finish()
        [record] = bridge.records
    assert status == 200 and KEY not in answer and KEY not in json.dumps(record.to_json())
    if stream:
        deltas = "".join(data["delta"].get("text", "") if agent == "anthropic-messages" else data.get("delta", "")
                         for name, data in events(answer)
                         if name in ("content_block_delta", "response.output_text.delta"))
    else:
        value = json.loads(answer)
        deltas = (value["content"][0]["text"] if agent == "anthropic-messages"
                  else value["output"][0]["content"][0]["text"])
    assert deltas == said.replace(KEY, "[redacted by forkpoint]")
