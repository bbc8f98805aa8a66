"""mini-swe-agent trajectory -> chat messages: its chat, with only the chat fields."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.adapters.mini_swe_agent.messages import to_chat

FIXTURE = Path(__file__).parents[2] / "fixtures" / "mini_swe_agent" / "2.4.6" / "parallel" / "trajectory.traj.json"


def test_messages_keep_roles_text_calls_and_ids() -> None:
    native = [m for m in json.loads(FIXTURE.read_text())["messages"] if m["role"] != "exit"]
    conversation = to_chat(FIXTURE.read_bytes())
    assert [m["role"] for m in conversation.messages] == [m["role"] for m in native]
    for ours, theirs in zip(conversation.messages, native, strict=True):
        assert ours["content"] == (theirs["content"] or "")
        assert "extra" not in ours
        if theirs["role"] == "tool":
            assert ours["tool_call_id"] == theirs["tool_call_id"]
        for call, native_call in zip(ours.get("tool_calls", []), theirs.get("tool_calls") or [], strict=True):
            assert call["id"] == native_call["id"]
            assert call["function"] == {"name": native_call["function"]["name"],
                                        "arguments": native_call["function"]["arguments"]}
    assert "messages with role 'exit' left out" in conversation.notes
