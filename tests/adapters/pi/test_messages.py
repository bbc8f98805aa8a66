"""Pi session -> chat messages, field by field against the session of a real recording."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.adapters.pi.messages import to_chat

FIXTURE = Path(__file__).parents[2] / "fixtures" / "pi" / "0.83.0" / "parallel" / "session.jsonl"


def test_parallel_session_converts_field_by_field() -> None:
    native = [json.loads(line)["message"] for line in FIXTURE.read_text().splitlines()
              if json.loads(line)["type"] == "message"]
    messages = to_chat(FIXTURE.read_bytes()).messages
    assert len(messages) == len(native)
    for ours, theirs in zip(messages, native, strict=True):
        if theirs["role"] == "toolResult":
            assert ours == {"role": "tool", "tool_call_id": theirs["toolCallId"],
                            "content": "\n".join(b["text"] for b in theirs["content"])}
        elif theirs["role"] == "assistant":
            blocks = theirs["content"]
            thoughts = [b["thinking"] for b in blocks if b["type"] == "thinking"]
            assert ours.get("reasoning_content", "") == "\n".join(thoughts)
            assert [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"]))
                    for c in ours.get("tool_calls", [])] == [
                (b["id"], b["name"], b["arguments"]) for b in blocks if b["type"] == "toolCall"]
        else:
            assert ours == {"role": "user", "content": theirs["content"][0]["text"]}
