"""ScriptedModel's OpenAI Responses API over real loopback HTTP: SSE order, item reassembly, steps, request log."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from forkpoint.testing.scripted_model import ScriptedModel, custom_tool_call, stable_id, text, thinking, tool_use

TOOLS = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+" + "hello " * 30 + "\n*** End Patch\n"
USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]}
DEV = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<skills_instructions>"}]}


def post(url: str, body: dict[str, Any], path: str = "/v1/responses") -> tuple[str, str]:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), method="POST",
                                     headers={"content-type": "application/json", "authorization": "Bearer secret"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.headers.get("content-type", ""), response.read().decode()


def get(url: str, path: str) -> Any:
    with urllib.request.urlopen(url + path, timeout=10) as response:
        return json.loads(response.read())


def parse_sse(raw: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for chunk in raw.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in chunk.splitlines())
        data = json.loads(lines["data"])
        assert data["type"] == lines["event"]
        events.append((lines["event"], data))
    return events


def reassemble(events: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Client-side reassembly from the deltas (like Codex does while streaming), checked against output_item.done."""
    items: dict[int, dict[str, Any]] = {}
    for name, data in events:
        if name == "response.output_item.added":
            items[data["output_index"]] = dict(data["item"])
        elif name == "response.output_text.delta":
            item = items[data["output_index"]]
            item["text"] = item.get("text", "") + data["delta"]
        elif name == "response.function_call_arguments.delta":
            items[data["output_index"]]["arguments"] += data["delta"]
        elif name == "response.custom_tool_call_input.delta":
            items[data["output_index"]]["input"] += data["delta"]
        elif name == "response.reasoning_summary_text.delta":
            item = items[data["output_index"]]
            item["text"] = item.get("text", "") + data["delta"]
        elif name == "response.output_item.done":
            done, item = data["item"], items[data["output_index"]]
            assert done["id"] == item["id"] and done["type"] == item["type"]
            if done["type"] == "message":
                assert item["text"] == done["content"][0]["text"]
            elif done["type"] == "reasoning":
                assert item["text"] == done["summary"][0]["text"]
            elif done["type"] == "function_call":
                assert item["arguments"] == done["arguments"]
            else:
                assert item["input"] == done["input"]
            items[data["output_index"]] = done
    return [items[i] for i in sorted(items)]


def body(items: list[dict[str, Any]], *, stream: bool = True, tools: bool = True) -> dict[str, Any]:
    return {"model": "gpt-5.5", "stream": stream, "input": items, "tools": TOOLS if tools else []}


def test_sse_event_order_and_item_reassembly() -> None:
    big = {"cmd": "printf '%s\\n' " + "x" * 300}
    model = ScriptedModel([[thinking("plan it"), text("Running both."), tool_use("exec_command", big),
                            tool_use("exec_command", {"cmd": "ls"}, id="call_fixed"),
                            custom_tool_call("apply_patch", PATCH)]], seed="r1")
    with model.serve() as url:
        content_type, raw = post(url, body([DEV, USER]))
    assert content_type.startswith("text/event-stream")
    events = parse_sse(raw)
    names = [name for name, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"] and names[-1] == "response.completed"
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    added = [i for i, n in enumerate(names) if n == "response.output_item.added"]
    done = [i for i, n in enumerate(names) if n == "response.output_item.done"]
    assert len(added) == len(done) == 5 and all(a < b for a, b in zip(added, done, strict=True))
    assert all(done[i] < added[i + 1] for i in range(4))
    assert len([n for n in names if n == "response.function_call_arguments.delta"]) > 2  # big arguments are split
    assert len([n for n in names if n == "response.custom_tool_call_input.delta"]) > 1

    items = reassemble(events)
    assert [i["type"] for i in items] == ["reasoning", "message", "function_call", "function_call",
                                          "custom_tool_call"]
    assert items[0]["summary"] == [{"type": "summary_text", "text": "plan it"}]
    assert items[0]["encrypted_content"] == thinking("x")["signature"]
    assert items[1]["role"] == "assistant" and items[1]["content"][0] == {"type": "output_text",
                                                                          "text": "Running both.", "annotations": []}
    assert json.loads(items[2]["arguments"]) == big and items[2]["name"] == "exec_command"
    assert items[2]["call_id"] == stable_id("call_", "r1", 0, 2) and items[2]["id"].startswith("fc_")
    assert items[3]["call_id"] == "call_fixed"
    assert items[4] == {"type": "custom_tool_call", "id": items[4]["id"], "status": "completed",
                        "name": "apply_patch", "input": PATCH, "call_id": stable_id("call_", "r1", 0, 4)}
    assert items[4]["id"].startswith("ctc_")
    assert len({i["id"] for i in items}) == 5

    completed = events[-1][1]["response"]
    assert completed["status"] == "completed" and completed["output"] == items
    usage = completed["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert completed["id"] == events[0][1]["response"]["id"] and completed["id"].startswith("resp_")


def test_non_stream_and_deterministic_ids() -> None:
    script = [[text("hi"), tool_use("exec_command", {"cmd": "ls"})]]
    answers = []
    for _ in range(2):
        with ScriptedModel(script, seed="same").serve() as url:
            answers.append(json.loads(post(url, body([USER], stream=False))[1]))
    assert answers[0] == answers[1]
    assert answers[0]["object"] == "response" and answers[0]["status"] == "completed"
    assert [i["type"] for i in answers[0]["output"]] == ["message", "function_call"]


def test_step_selection_counts_assistant_groups() -> None:
    model = ScriptedModel([[tool_use("exec_command", {"cmd": "a"}), tool_use("exec_command", {"cmd": "b"})],
                           [text("note"), custom_tool_call("apply_patch", PATCH)],
                           [text("third")]])

    def call(call_id: str) -> dict[str, Any]:
        return {"type": "function_call", "name": "exec_command", "arguments": "{}", "call_id": call_id}

    def output(call_id: str) -> dict[str, Any]:
        return {"type": "function_call_output", "call_id": call_id, "output": "ok"}

    said = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "note"}]}
    patch = {"type": "custom_tool_call", "name": "apply_patch", "input": PATCH, "call_id": "p"}
    patched = {"type": "custom_tool_call_output", "call_id": "p", "output": "done"}
    first_batch = [call("a"), call("b"), output("a"), output("b")]  # a parallel batch is one group
    with model.serve() as url:
        replies = [json.loads(post(url, body(items, stream=False))[1])["output"] for items in (
            [DEV, USER],
            [DEV, USER, *first_batch],
            [DEV, USER, *first_batch, said, patch, patched],  # text + call of one response: one group
            [DEV, USER, *first_batch, said, patch, patched, {**said, "id": "x"}, USER],  # resumed: 3 groups
        )]
        aux = json.loads(post(url, body([USER], stream=False, tools=False))[1])["output"]
    assert [i["type"] for i in replies[0]] == ["function_call", "function_call"]
    assert [i["type"] for i in replies[1]] == ["message", "custom_tool_call"]
    assert replies[2][0]["content"][0]["text"] == "third"
    assert replies[3][0]["content"][0]["text"] == model.final_text
    assert aux[0]["content"][0]["text"] == model.aux_text
    assert [r["step"] for r in model.requests] == [0, 1, 2, 3, None]
    assert [r["kind"] for r in model.requests] == ["main"] * 4 + ["aux"]


def test_counter_mode() -> None:
    model = ScriptedModel([[text("a")], [text("b")]], step_mode="counter")
    with model.serve() as url:
        replies = [json.loads(post(url, body([USER], stream=False))[1])["output"][0]["content"][0]["text"]
                   for _ in range(3)]
    assert replies == ["a", "b", "Done."]


def test_paths_models_and_request_log(tmp_path: Path) -> None:
    log = tmp_path / "requests.jsonl"
    model = ScriptedModel([[text("one")], [text("two")]], log_path=log)
    with model.serve() as url:
        assert get(url, "/v1/models") == get(url, "/models") == {"object": "list", "data": [], "models": []}
        _, raw = post(url, body([USER]), path="/responses")  # a base_url without /v1
        _, raw_v1 = post(url, body([USER]))
    assert reassemble(parse_sse(raw)) == reassemble(parse_sse(raw_v1))
    assert [(r["method"], r["path"], r["kind"]) for r in model.requests] == [
        ("GET", "/v1/models", "models"), ("GET", "/models", "models"),
        ("POST", "/responses", "main"), ("POST", "/v1/responses", "main")]
    main = model.requests[-1]
    assert main["api"] == "responses" and main["output_types"] == ["message"] and main["body"]["input"] == [USER]
    assert all("authorization" not in {k.lower() for k in r["headers"]} for r in model.requests)
    assert [json.loads(line) for line in log.read_text().splitlines()] == model.requests


def test_raw_function_call_block_and_unsupported_block() -> None:
    model = ScriptedModel([[{"type": "function_call", "name": "exec_command", "arguments": "{not json"}],
                           [{"type": "image", "source": {}}]], seed="raw")
    _, items = model.respond_responses("main", 0)
    assert items[0]["arguments"] == "{not json" and items[0]["call_id"] == stable_id("call_", "raw", 0, 0)
    with pytest.raises(ValueError, match="unsupported scripted block type"):
        model.respond_responses("main", 1)


def test_script_file_drives_both_apis(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps({"seed": "file", "turns": [{"content": [tool_use("exec_command", {"cmd": "ls"})]}]}))
    model = ScriptedModel.from_file(script)
    with model.serve() as url:
        output = json.loads(post(url, body([USER], stream=False))[1])["output"]
    assert output[0]["arguments"] == '{"cmd": "ls"}' and output[0]["call_id"] == stable_id("call_", "file", 0, 0)
