"""Qwen Code session -> chat messages for `forkpoint export`."""

from __future__ import annotations

from pathlib import Path

from forkpoint.adapters.qwen_code.messages import to_chat

FIXTURE = Path(__file__).parents[2] / "fixtures" / "qwen_code" / "0.24.4" / "tools" / "session.jsonl"


def test_the_real_recording_exports_its_turns() -> None:
    conversation = to_chat(FIXTURE.read_bytes())
    roles = [m["role"] for m in conversation.messages]
    assert roles[0] == "user" and roles.count("tool") == 7 and roles[-1] == "assistant"
    assert conversation.model == "qwen3-coder-plus"
    assert conversation.messages[1]["tool_calls"][0]["function"]["name"] == "write_file"
