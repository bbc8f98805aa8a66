"""`forkpoint export` of an OpenHands SDK prefix bundle: the chat the model saw."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.adapters.openhands_sdk.messages import to_chat
from forkpoint.adapters.openhands_sdk.parse import parse_conversation
from forkpoint.adapters.openhands_sdk.session import bundle
from forkpoint.core.model import Mode, Plan

FIXTURES = Path(__file__).parents[2] / "fixtures" / "openhands-sdk" / "1.58.2"


def test_export_gives_the_models_view_of_the_prefix() -> None:
    trajectory = parse_conversation(FIXTURES / "parallel" / "conversation" / "base_state.json")
    document = bundle(Plan(trajectory, 1, Mode.REPLAY_AND_CONTINUE, "p"), None)
    chat = to_chat(json.dumps(document).encode())
    assert [m["role"] for m in chat.messages] == ["system", "user", "assistant", "tool", "tool"]
    assert [c["function"]["name"] for c in chat.messages[2]["tool_calls"]] == ["terminal", "file_editor"]
    assert chat.messages[2]["content"] == "Two things at once."
    assert chat.model == "openai/scripted" and chat.tools
    assert chat.messages[3]["content"].startswith("data\nnotes.txt")
