"""ScriptedModel's OpenAI Chat Completions over real loopback HTTP: JSON and SSE answers, step selection, stalls."""

from __future__ import annotations

import json
import socket
import urllib.request
from typing import Any

import pytest

from forkpoint.testing import ScriptedModel, text, thinking, tool_use
from forkpoint.testing.scripted_anthropic import assistant_runs

TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
SCRIPT = [
    [thinking("look first"), text("Listing."), tool_use("bash", {"command": "ls"}, id="call_a"),
     tool_use("bash", {"command": "pwd"})],
    [text("All done here.")],
]


def post(url: str, body: dict[str, Any], path: str = "/v1/chat/completions") -> tuple[str, str]:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json", "authorization": "Bearer sk-x"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers.get("content-type", ""), response.read().decode()


def reassemble(raw: str) -> tuple[dict[str, Any], str | None, dict[str, Any] | None, bool]:
    """Client-side reassembly of a streamed completion, the way the OpenAI SDKs do it."""
    message: dict[str, Any] = {"content": "", "reasoning_content": "", "tool_calls": []}
    finish: str | None = None
    usage = None
    done = False
    for block in raw.strip().split("\n\n"):
        assert block.startswith("data: "), block
        data = block[len("data: "):]
        if data == "[DONE]":
            done = True
            continue
        assert not done, "data after [DONE]"
        chunk = json.loads(data)
        assert chunk["object"] == "chat.completion.chunk"
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk["choices"]:
            delta = choice["delta"]
            message["content"] += delta.get("content") or ""
            message["reasoning_content"] += delta.get("reasoning_content") or ""
            for call in delta.get("tool_calls") or []:
                calls = message["tool_calls"]
                if call["index"] == len(calls):
                    calls.append({"id": call["id"], "name": call["function"]["name"], "arguments": ""})
                calls[call["index"]]["arguments"] += call["function"].get("arguments", "")
            finish = choice["finish_reason"] or finish
    return message, finish, usage, done


def test_assistant_runs_counts_consecutive_assistant_messages_once() -> None:
    roles = ["system", "user", "assistant", "tool", "tool", "assistant", "assistant", "tool", "user"]
    assert assistant_runs([{"role": r} for r in roles]) == 2
    assert assistant_runs(None) == 0
    assert assistant_runs("not a list") == 0


def test_json_answer_carries_calls_reasoning_and_finish_reason() -> None:
    model = ScriptedModel(SCRIPT, seed="s1")
    with model.serve() as url:
        kind, raw = post(url, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS})
    assert kind.startswith("application/json")
    answer = json.loads(raw)
    choice = answer["choices"][0]
    assert answer["object"] == "chat.completion" and answer["model"] == "m"
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == "Listing." and message["reasoning_content"] == "look first"
    ids = [c["id"] for c in message["tool_calls"]]
    assert ids[0] == "call_a" and ids[1].startswith("call_") and ids[1] != "call_a"
    assert [json.loads(c["function"]["arguments"]) for c in message["tool_calls"]] == [{"command": "ls"},
                                                                                          {"command": "pwd"}]
    assert answer["usage"]["total_tokens"] == answer["usage"]["prompt_tokens"] + answer["usage"]["completion_tokens"]
    assert model.requests[0]["headers"].get("authorization") is None  # secrets are not logged


def test_stream_reassembles_to_the_same_message_with_usage_and_done() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "stream": True,
            "stream_options": {"include_usage": True}}
    with ScriptedModel(SCRIPT, seed="s1").serve() as url:
        kind, raw = post(url, body, "/chat/completions")
        _, plain = post(url, {**body, "stream": False})
    assert kind.startswith("text/event-stream")
    message, finish, usage, done = reassemble(raw)
    expected = json.loads(plain)["choices"][0]["message"]
    assert done and finish == "tool_calls" and usage is not None
    assert message["content"] == expected["content"]
    assert message["reasoning_content"] == expected["reasoning_content"]
    assert [(c["id"], c["name"], c["arguments"]) for c in message["tool_calls"]] == [
        (c["id"], c["function"]["name"], c["function"]["arguments"]) for c in expected["tool_calls"]]


def test_conversation_mode_answers_by_assistant_turns_and_ends_with_final_text() -> None:
    history = [{"role": "user", "content": "hi"},
               {"role": "assistant", "content": None, "tool_calls": [{"id": "call_a"}]},
               {"role": "tool", "tool_call_id": "call_a", "content": "x"}]
    with ScriptedModel(SCRIPT).serve() as url:
        second = json.loads(post(url, {"messages": history, "tools": TOOLS})[1])["choices"][0]
        history += [{"role": "assistant", "content": "All done here."}, {"role": "user", "content": "more"}]
        past_end = json.loads(post(url, {"messages": history, "tools": TOOLS})[1])["choices"][0]
    assert second["message"]["content"] == "All done here." and second["finish_reason"] == "stop"
    assert past_end["message"]["content"] == "Done." and "tool_calls" not in past_end["message"]


def test_requests_without_tools_are_aux_unless_tools_are_not_required() -> None:
    body = {"messages": [{"role": "user", "content": "Generate a title"}]}
    with ScriptedModel(SCRIPT).serve() as url:
        aux = json.loads(post(url, body)[1])["choices"][0]["message"]
    with ScriptedModel([[text("```bash\nls\n```")]], tools_required=False).serve() as url:
        main = json.loads(post(url, body)[1])["choices"][0]["message"]
    assert aux["content"] == "Scripted helper answer"
    assert main["content"] == "```bash\nls\n```"


def test_loop_last_repeats_the_last_turn_with_fresh_call_ids() -> None:
    script = [[tool_use("bash", {"command": "true"})]]
    history: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    ids = []
    with ScriptedModel(script, loop_last=True).serve() as url:
        for _ in range(3):
            message = json.loads(post(url, {"messages": history, "tools": TOOLS})[1])["choices"][0]["message"]
            call = message["tool_calls"][0]
            ids.append(call["id"])
            history += [{"role": "assistant", "tool_calls": [call]},
                        {"role": "tool", "tool_call_id": call["id"], "content": ""}]
    assert len(set(ids)) == 3


def test_a_stalled_turn_sends_headers_and_then_nothing() -> None:
    script = [{"content": [text("never sent")], "stall": True}]
    with ScriptedModel(script).serve() as url:
        port = int(url.rsplit(":", 1)[1])
        payload = json.dumps({"messages": [], "tools": TOOLS, "stream": True}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
            connection.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                               + f"Content-Length: {len(payload)}\r\n\r\n".encode() + payload)
            head = b""
            while b"\r\n\r\n" not in head:
                head += connection.recv(4096)
            connection.settimeout(1.0)
            with pytest.raises(TimeoutError):
                connection.recv(4096)
    assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head
