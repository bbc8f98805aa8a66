"""OpenCode export -> chat messages, field by field against the export of a real recording."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.adapters.opencode.messages import to_chat

FIXTURE = Path(__file__).parents[2] / "fixtures" / "opencode" / "1.18.33" / "parallel" / "export.json"


def test_each_step_is_an_assistant_message_followed_by_its_tool_results() -> None:
    document = json.loads(FIXTURE.read_text())
    messages = to_chat(FIXTURE.read_bytes()).messages
    tool_parts = [p for m in document["messages"] for p in m["parts"] if p["type"] == "tool"]
    calls = [c for m in messages for c in m.get("tool_calls", [])]
    assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        (p["callID"], p["tool"], p["state"]["input"]) for p in tool_parts]
    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    assert results == {p["callID"]: p["state"].get("output", p["state"].get("error")) for p in tool_parts}
    steps = sum(1 for m in document["messages"] for p in m["parts"] if p["type"] == "step-start")
    assert sum(1 for m in messages if m["role"] == "assistant") == steps
    assert messages[0]["role"] == "user"
