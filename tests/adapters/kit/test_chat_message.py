"""The shared Chat Completions message projection both OpenHands gates compare."""

from __future__ import annotations

import pytest

from forkpoint.adapters.kit.chat_message import project, project_call, project_text, wire_tool_calls
from forkpoint.bridge.gate import Refusal


def test_text_parts_join_and_anything_else_stays_visible() -> None:
    assert project_text([{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]) == "ab"
    image = [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert project_text(image) == {"non_text_parts": image}
    assert project_text(["loose"]) == {"non_text_parts": ["loose"]}
    assert project_text(None) == ""


def test_a_message_keeps_its_call_ids_and_parses_arguments() -> None:
    message = {"role": "assistant", "content": "hi", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}},
        {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{not json"}}]}
    assert project(message) == {"role": "assistant", "text": "hi", "tool_calls": [
        {"id": "c1", "type": "function", "name": "bash", "arguments": {"command": "ls"}},
        {"id": "c2", "type": "function", "name": "bash", "arguments": {"_raw_arguments": "{not json"}}]}
    assert project({"role": "tool", "content": "out", "tool_call_id": "c1", "name": "bash"}) == {
        "role": "tool", "text": "out", "tool_call_id": "c1", "name": "bash"}
    assert project("junk") == {"role": "?", "invalid": True}
    assert project({"role": "assistant", "tool_calls": "junk"})["tool_calls"] == {"invalid": "junk"}
    assert project_call(7) == {"invalid": 7}


def test_wire_tool_calls_parse_arguments_and_refuse_a_call_that_is_not_a_function() -> None:
    message = {"role": "assistant", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]}
    assert wire_tool_calls(message, 3) == [{"id": "c1", "name": "bash", "arguments": {"command": "ls"}}]
    assert wire_tool_calls({"role": "assistant"}, 0) == []
    with pytest.raises(Refusal, match=r"messages\[3\] has a tool call that is not a function call"):
        wire_tool_calls({"role": "assistant", "tool_calls": [{"id": "c1", "type": "custom"}]}, 3)
