"""OpenHands events -> chat messages, as OpenHands' ConversationMemory builds them (one message per response)."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.adapters.openhands.format import model_text
from forkpoint.adapters.openhands.messages import to_chat

FIXTURE = Path(__file__).parents[2] / "fixtures" / "openhands" / "0.62.0" / "parallel" / "trajectory.json"


def test_events_convert_field_by_field() -> None:
    events = json.loads(FIXTURE.read_text())
    conversation = to_chat(FIXTURE.read_bytes())
    messages = conversation.messages
    assert messages[0] == {"role": "system", "content": events[0]["args"]["content"]}
    assert conversation.tools == events[0]["args"]["tools"]
    responses = {e["tool_call_metadata"]["model_response"]["id"]: e["tool_call_metadata"]["model_response"]
                 for e in events if "action" in e and e.get("tool_call_metadata")}
    assistants = [m for m in messages if m.get("tool_calls")]
    assert len(assistants) == len(responses)
    for message, response in zip(assistants, responses.values(), strict=True):
        native = response["choices"][0]["message"]
        assert [c["id"] for c in message["tool_calls"]] == [c["id"] for c in native["tool_calls"]]
        assert [c["function"]["arguments"] for c in message["tool_calls"]] == [
            c["function"]["arguments"] for c in native["tool_calls"]]
    observations = [e for e in events if "observation" in e and e.get("tool_call_metadata")]
    tools = [m for m in messages if m["role"] == "tool"]
    assert [(m["tool_call_id"], m["content"]) for m in tools] == [
        (e["tool_call_metadata"]["tool_call_id"], model_text(e)) for e in observations]
