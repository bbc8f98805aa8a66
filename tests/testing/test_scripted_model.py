"""ScriptedModel over real loopback HTTP: SSE order, tool_use reassembly, step selection, request log, scripted
faults."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from forkpoint.testing import ScriptedModel, Turn, stable_id, text, thinking, tool_use
from forkpoint.testing.scripted_model import Fault

TOOLS = [{"name": "Bash", "input_schema": {"type": "object"}}]


def post(url: str, body: dict[str, Any], path: str = "/v1/messages?beta=true") -> tuple[str, str]:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json", "x-api-key": "secret"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers.get("content-type", ""), response.read().decode()


def parse_sse(raw: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def reassemble(events: list[tuple[str, dict[str, Any]]]) -> tuple[list[dict[str, Any]], str]:
    """Client-side reassembly of a streamed message, like an SDK does."""
    blocks: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    stop_reason = ""
    for name, data in events:
        if name == "content_block_start":
            blocks.append(dict(data["content_block"]))
        elif name == "content_block_delta":
            delta, block = data["delta"], blocks[data["index"]]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] += delta["signature"]
            elif delta["type"] == "input_json_delta":
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif name == "content_block_stop" and data["index"] in partial:
            blocks[data["index"]]["input"] = json.loads(partial[data["index"]])
        elif name == "message_delta":
            stop_reason = data["delta"]["stop_reason"]
    return blocks, stop_reason


def body(messages: list[dict[str, Any]], *, stream: bool = True, tools: bool = True) -> dict[str, Any]:
    return {"model": "m", "stream": stream, "messages": messages, "tools": TOOLS if tools else []}


USER = {"role": "user", "content": "go"}
BIG_INPUT = {"command": "printf '%s\\n' " + "x" * 300, "description": "long input → split in several deltas"}


def test_sse_event_order_and_tool_use_reassembly() -> None:
    model = ScriptedModel([[thinking("let me think"), text("Running."), tool_use("Bash", BIG_INPUT),
                            tool_use("Bash", {"command": "ls"})]], seed="s1")
    with model.serve() as url:
        content_type, raw = post(url, body([USER]))
    assert content_type.startswith("text/event-stream")
    events = parse_sse(raw)
    names = [name for name, _ in events]
    assert names[0] == "message_start" and names[-2:] == ["message_delta", "message_stop"]
    starts = [i for i, n in enumerate(names) if n == "content_block_start"]
    stops = [i for i, n in enumerate(names) if n == "content_block_stop"]
    assert len(starts) == len(stops) == 4 and all(a < b for a, b in zip(starts, stops, strict=True))
    assert all(stops[i] < starts[i + 1] for i in range(3))
    json_deltas = [d for n, d in events if n == "content_block_delta" and d["delta"]["type"] == "input_json_delta"]
    assert len([d for d in json_deltas if d["index"] == 2]) > 1
    assert any(d["delta"]["type"] == "signature_delta" for n, d in events if n == "content_block_delta")
    blocks, stop_reason = reassemble(events)
    assert stop_reason == "tool_use"
    assert blocks[0] == {"type": "thinking", "thinking": "let me think", "signature": thinking("x")["signature"]}
    assert blocks[1] == {"type": "text", "text": "Running."}
    assert blocks[2]["input"] == BIG_INPUT and blocks[3]["input"] == {"command": "ls"}
    assert blocks[2]["id"] == stable_id("toolu_", "s1", 0, 2)
    assert blocks[2]["id"].startswith("toolu_") and len(blocks[2]["id"]) == 30 and blocks[2]["id"] != blocks[3]["id"]


def test_non_stream_message_and_ids_deterministic() -> None:
    script = [[tool_use("Bash", {"command": "ls"}), tool_use("Read", {"file_path": "a"}, id="toolu_fixed")]]
    answers = []
    for _ in range(2):
        with ScriptedModel(script, seed="same").serve() as url:
            answers.append(json.loads(post(url, body([USER], stream=False))[1]))
    assert answers[0] == answers[1]
    message = answers[0]
    assert message["type"] == "message" and message["stop_reason"] == "tool_use"
    assert [b["id"] for b in message["content"]][1] == "toolu_fixed"


def test_conversation_step_selection_survives_resume() -> None:
    model = ScriptedModel([Turn((tool_use("Bash", {"command": "ls"}),)), [text("second")], [text("third")]])
    assistant = {"role": "assistant", "content": [{"type": "text", "text": "x"}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}
    with model.serve() as url:
        first = json.loads(post(url, body([USER], stream=False))[1])
        # a resumed session: one earlier response (split over two messages) is replayed -> turn 1
        second = json.loads(post(url, body([USER, assistant, assistant, result], stream=False))[1])
        again = json.loads(post(url, body([USER, assistant, assistant, result], stream=False))[1])
        past_end = json.loads(post(url, body([USER, assistant, result] * 3, stream=False))[1])
        helper = json.loads(post(url, body([USER, assistant, result], stream=False, tools=False))[1])
    assert first["content"][0]["name"] == "Bash"
    assert second["content"] == again["content"] == [text("second")]
    assert past_end["content"] == [text("Done.")] and past_end["stop_reason"] == "end_turn"
    assert helper["content"] == [text(model.aux_text)]
    assert [r["step"] for r in model.requests] == [0, 1, 1, 3, None]


def test_counter_mode() -> None:
    model = ScriptedModel([[text("a")], [text("b")]], step_mode="counter")
    with model.serve() as url:
        replies = [json.loads(post(url, body([USER], stream=False))[1])["content"][0]["text"] for _ in range(3)]
        json.loads(post(url, body([USER], stream=False, tools=False))[1])
    assert replies == ["a", "b", "Done."]


def test_request_log_other_endpoints_and_jsonl(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    model = ScriptedModel([], log_path=log)
    with model.serve() as url:
        _, counted = post(url, {"messages": [USER]}, path="/v1/messages/count_tokens")
        for method in ("HEAD", "GET"):
            with urllib.request.urlopen(urllib.request.Request(url + "/", method=method), timeout=10) as response:
                assert response.status == 200
        post(url, body([USER]), path="/v1/messages")
    assert json.loads(counted) == {"input_tokens": 1234}
    assert [(r["method"], r["path"], r["kind"]) for r in model.requests] == [
        ("POST", "/v1/messages/count_tokens", "count_tokens"), ("HEAD", "/", "other"), ("GET", "/", "other"),
        ("POST", "/v1/messages", "main")]
    assert all("x-api-key" not in {k.lower() for k in r["headers"]} for r in model.requests)
    assert model.requests[-1]["body"]["messages"] == [USER]
    assert [json.loads(line) for line in log.read_text().splitlines()] == model.requests


def test_in_process_async_with_aiohttp_client() -> None:
    async def run() -> list[dict[str, Any]]:
        model = ScriptedModel([[text("hello")]])
        async with (model.running() as url, aiohttp.ClientSession() as session,
                    session.post(url + "/v1/messages", json=body([USER])) as response):
            raw = await response.text()
        return reassemble(parse_sse(raw))[0]

    assert asyncio.run(run()) == [text("hello")]


def test_script_file_and_cli(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"seed": "cli", "turns": [{"content": [{"type": "text", "text": "from file"}]}]}))
    assert ScriptedModel.from_file(script).seed == "cli"
    proc = subprocess.Popen([sys.executable, "-m", "forkpoint.testing.scripted_model", "--script", str(script)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        message = json.loads(post(url, body([USER], stream=False))[1])
        assert message["content"] == [text("from file")]
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert "RuntimeWarning" not in stderr


FAULT_ROUTES = {"/v1/messages": {"messages": [USER], "tools": TOOLS},
                "/v1/responses": {"input": [USER], "tools": TOOLS},
                "/v1/chat/completions": {"messages": [USER], "tools": TOOLS}}


async def _attempt(session: aiohttp.ClientSession, url: str, body: dict[str, Any]) -> tuple[int | str, bytes, str]:
    """(status or the client error's name, the bytes read before it, the Retry-After header)."""
    async with session.post(url, json=body) as response:
        read = b""
        try:
            async for chunk in response.content.iter_any():
                read += chunk
        except aiohttp.ClientPayloadError:
            return "broken", read, ""
        return response.status, read, response.headers.get("Retry-After", "")


@pytest.mark.parametrize("stream", [True, False])
@pytest.mark.parametrize("path", sorted(FAULT_ROUTES))
def test_scripted_faults_fail_a_turns_first_requests_in_order_then_it_answers(
        tmp_path: Path, path: str, stream: bool) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"turns": [{"content": [text("finally")], "faults": [
        {"status": 429, "headers": {"Retry-After": "2"}}, {"drop": "before_first_byte"},
        {"drop": "after_first_byte"}, {"status": 503}]}]}))
    model = ScriptedModel.from_file(script)
    body = {**FAULT_ROUTES[path], "stream": stream}

    async def run() -> list[tuple[int | str, bytes, str]]:
        outcomes: list[tuple[int | str, bytes, str]] = []
        async with model.running() as url, aiohttp.ClientSession() as session:
            helper = await _attempt(session, url + path, {**body, "tools": []})  # helpers never fail
            assert helper[0] == 200
            for _ in range(5):
                try:
                    outcomes.append(await _attempt(session, url + path, body))
                except aiohttp.ServerDisconnectedError:
                    outcomes.append(("disconnected", b"", ""))
        return outcomes

    outcomes = asyncio.run(run())
    assert [(status, retry_after) for status, _, retry_after in outcomes] == [
        (429, "2"), ("disconnected", ""), ("broken", ""), (503, ""), (200, "")]
    assert json.loads(outcomes[0][1])["error"]["type"] == "rate_limit_error"
    whole = outcomes[4][1]
    assert b"finally" in whole
    assert outcomes[2][1] and whole.startswith(outcomes[2][1]) and len(outcomes[2][1]) < len(whole)  # a beginning
    assert [entry.get("fault") for entry in model.requests] == [
        None, "status 429", "drop before_first_byte", "drop after_first_byte", "status 503", None]


@pytest.mark.parametrize(("fault", "error"), [
    ({"status": 429, "drop": "before_first_byte"}, "exactly one of status and drop"),
    ({}, "exactly one of status and drop"),
    ({"drop": "sometimes"}, "a scripted drop is one of"),
    ({"drop": "after_first_byte", "headers": {"Retry-After": "1"}}, "without headers"),
    ({"status": 200}, "4xx or 5xx"),
    ({"status": 503, "retry_after": 1}, "unknown scripted fault keys: retry_after"),
])
def test_a_malformed_scripted_fault_is_refused_when_the_script_loads(fault: dict[str, Any], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        ScriptedModel([{"content": [text("x")], "faults": [fault]}])


def test_faults_in_python_are_the_same_as_in_json() -> None:
    turn = Turn((text("x"),), faults=(Fault(429, (("Retry-After", "0"),)), Fault(drop="before_first_byte")))
    assert Turn.of({"content": [text("x")], "faults": [{"status": 429, "headers": {"Retry-After": 0}},
                                                        {"drop": "before_first_byte"}]}) == turn
