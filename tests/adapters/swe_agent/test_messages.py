"""SWE-agent .traj -> chat messages: its history, with only the chat fields."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.adapters.swe_agent.messages import to_chat

FIXTURE = Path(__file__).parents[2] / "fixtures" / "swe_agent" / "1.1.0" / "thought_action"
FIXTURE = FIXTURE / "toy__thought_action-1.traj"


def test_history_is_the_chat() -> None:
    history = json.loads(FIXTURE.read_text())["history"]
    messages = to_chat(FIXTURE.read_bytes()).messages
    assert [m["role"] for m in messages] == [m["role"] for m in history]
    for ours, theirs in zip(messages, history, strict=True):
        content = theirs["content"]
        expected = content if isinstance(content, str) else "\n".join(b["text"] for b in content)
        assert ours["content"] == expected
        assert set(ours) <= {"role", "content", "reasoning_content", "tool_calls", "tool_call_id"}
