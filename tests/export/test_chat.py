"""forkpoint.export.chat: rows that already are chat messages keep only their chat fields."""

from __future__ import annotations

from forkpoint.export.chat import from_chat_rows


def test_chat_rows_keep_roles_text_reasoning_calls_and_tool_ids() -> None:
    rows = [
        {"role": "system", "content": "be brief", "extra": {"cost": 1}},
        {"role": "user", "content": [{"type": "text", "text": "fix it"}, {"type": "image_url"}]},
        {"role": "assistant", "content": "looking", "thinking_blocks": [{"thinking": "a"}, {"thinking": "b"}],
         "tool_calls": [{"id": "c1", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_ids": ["c1"], "content": "a.py"},
        {"role": "exit", "content": "done"},
        "not a message",
    ]
    conversation = from_chat_rows(rows)
    assert conversation.messages == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "fix it\n[image_url]"},
        {"role": "assistant", "content": "looking", "reasoning_content": "a\nb",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    ]
    assert conversation.notes == ["messages with role 'exit' left out"]


def test_anything_but_a_list_is_an_empty_conversation() -> None:
    for rows in (None, {"role": "user"}, "text"):
        conversation = from_chat_rows(rows)
        assert (conversation.messages, conversation.notes) == ([], [])
