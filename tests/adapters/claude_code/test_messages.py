"""Claude Code session -> chat messages, field by field against the native session of a real recording."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.adapters.claude_code.messages import to_chat

FIXTURE = Path(__file__).parents[2] / "fixtures" / "claude_code" / "2.1.332" / "parallel" / "session.jsonl"


def test_parallel_recording_converts_field_by_field() -> None:
    lines = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    native = [line["message"] for line in lines if line.get("type") in ("user", "assistant") and "message" in line]
    calls = [b for m in native if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    results = [b for m in native if m["role"] == "user" and isinstance(m["content"], list) for b in m["content"]]
    conversation = to_chat(FIXTURE.read_bytes())
    task, turn, *tool_messages, final = conversation.messages
    assert task == {"role": "user", "content": native[0]["content"]}
    assert turn["role"] == "assistant" and turn["content"] == "Reading both files in parallel."
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in turn["tool_calls"]] == [
        (b["id"], b["name"], b["input"]) for b in calls
    ]
    assert [(m["tool_call_id"], m["content"]) for m in tool_messages] == [
        (b["tool_use_id"], b["content"]) for b in results
    ]
    assert final["role"] == "assistant" and final["content"] == native[-1]["content"][0]["text"]
    assert conversation.model == native[-1]["model"]


def test_one_response_split_over_lines_is_one_message_with_thinking_as_reasoning(tmp_path: Path) -> None:
    from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, thinking, tool_use

    builder = ClaudeSessionBuilder()
    builder.user_prompt("task")
    builder.assistant([thinking("plan it"), text("doing"), tool_use("toolu_1", "Bash", {"command": "ls"})])
    builder.results({"toolu_1": "a\n"})
    conversation = to_chat(builder.write(tmp_path / "s.jsonl").read_bytes())
    assert [m["role"] for m in conversation.messages] == ["user", "assistant", "tool"]
    assert conversation.messages[1]["reasoning_content"] == "plan it"
    assert conversation.messages[1]["content"] == "doing"
    assert conversation.messages[2] == {"role": "tool", "tool_call_id": "toolu_1", "content": "a\n"}
