"""Codex rollout -> chat messages, field by field against the rollout of a real recording."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.adapters.codex.messages import to_chat

FIXTURE = Path(__file__).parents[2] / "fixtures" / "codex" / "0.171.0" / "parallel" / "rollout.jsonl"


def test_parallel_rollout_converts_field_by_field() -> None:
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    items = [line["payload"] for line in lines if line["type"] == "response_item"]
    meta = lines[0]["payload"]
    conversation = to_chat(FIXTURE.read_bytes())
    messages = conversation.messages
    assert messages[0] == {"role": "system", "content": meta["base_instructions"]["text"]}
    developer = [i for i in items if i["type"] == "message" and i["role"] == "developer"]
    assert messages[1] == {"role": "system", "content": "\n".join(part["text"] for part in developer[0]["content"])}
    calls = [i for i in items if i["type"] == "function_call"]
    outputs = [i for i in items if i["type"] == "function_call_output"]
    turn = next(m for m in messages if m.get("tool_calls"))
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in turn["tool_calls"]] == [
        (i["call_id"], i["name"], i["arguments"]) for i in calls
    ]
    tools = [m for m in messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tools] == [(i["call_id"], i["output"]) for i in outputs]
    assert conversation.model == "gpt-5.5"


def test_custom_tool_input_and_reasoning() -> None:
    rollout = b"\n".join(json.dumps(line).encode() for line in [
        {"type": "response_item", "payload": {"type": "message", "role": "user",
                                              "content": [{"type": "input_text", "text": "patch it"}]}},
        {"type": "response_item", "payload": {"type": "reasoning", "encrypted_content": "gAAA",
                                              "summary": [{"type": "summary_text", "text": "think"}]}},
        {"type": "response_item", "payload": {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch",
                                              "input": "*** Begin Patch\n*** End Patch"}},
        {"type": "response_item", "payload": {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"}},
    ])
    messages = to_chat(rollout).messages
    assert messages[1]["reasoning_content"] == "think"
    arguments = json.loads(messages[1]["tool_calls"][0]["function"]["arguments"])
    assert arguments == {"input": "*** Begin Patch\n*** End Patch"}
    assert messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "Done"}
