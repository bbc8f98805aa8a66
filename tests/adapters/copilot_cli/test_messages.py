"""Copilot CLI events -> chat messages (forkpoint export)."""

from __future__ import annotations

from pathlib import Path

from forkpoint.adapters.copilot_cli.messages import to_chat

FIXTURE = Path(__file__).parents[2] / "fixtures" / "copilot_cli" / "1.0.102" / "tools"


def test_the_recording_exports_as_the_conversation_a_resume_sends() -> None:
    conversation = to_chat((FIXTURE / "session.jsonl").read_bytes())
    roles = [m["role"] for m in conversation.messages]
    assert roles[:4] == ["system", "user", "assistant", "tool"] and roles.count("tool") == 12
    assert conversation.model == "gpt-4.1"
    assert conversation.messages[1]["content"].startswith("<current_datetime>")
    errors = [m["content"] for m in conversation.messages if m["role"] == "tool" and "exist" in m["content"]]
    assert errors == ["Parent directory does not exist", "Path does not exist"]
    assert conversation.messages[-1] == {"role": "assistant", "content": "Done: notes written and the greeting fixed."}
