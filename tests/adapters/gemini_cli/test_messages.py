"""Gemini CLI session -> chat messages (`forkpoint export`)."""

from __future__ import annotations

from pathlib import Path

from forkpoint.adapters.gemini_cli.messages import to_chat

FIXTURE = Path(__file__).parents[2] / "fixtures" / "gemini_cli" / "0.61.0" / "tools"


def test_the_recorded_session_becomes_a_chat_with_tool_calls_and_results() -> None:
    chat = to_chat((FIXTURE / "session.jsonl").read_bytes())
    roles = [m["role"] for m in chat.messages]
    assert chat.model == "gemini-2.5-pro" and roles[:3] == ["user", "user", "assistant"]
    calls = [c for m in chat.messages if m["role"] == "assistant" for c in m.get("tool_calls") or []]
    tools = [m for m in chat.messages if m["role"] == "tool"]
    assert len(calls) == len(tools) == 8 and "File not found" in tools[-1]["content"]
