"""The Anthropic protocol module. Its relay and stub are tested in tests/bridge/test_server.py and
tests/e2e/test_claude_bridge.py; here the Anthropic side of live sub-agents (``bridge.subagents``): the answer
reader and a request's opening."""

from __future__ import annotations

from forkpoint.bridge.protocols.anthropic import MAX_LINE_BYTES, ToolPrompts, encode, message_events, opening
from forkpoint.core.model import JsonObject

TOOLS = {"Agent": "prompt", "Task": "prompt"}
MESSAGE: JsonObject = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": []}


def streamed(*blocks: JsonObject, chunk: int = 3) -> bytes:
    return b"".join(encode(message_events(MESSAGE, list(blocks), "tool_use", 1, chunk=chunk)))


def read(data: bytes, piece: int) -> list[str]:
    reader = ToolPrompts(TOOLS)
    for at in range(0, len(data), piece):
        reader.feed(data[at:at + piece])
    return reader.prompts


def test_the_prompts_of_sub_agent_calls_are_read_in_any_split_and_other_tools_are_not() -> None:
    data = streamed({"type": "text", "text": "delegating"},
                    {"type": "tool_use", "id": "a", "name": "Agent", "input": {"prompt": "first \"quoted\" ünï"}},
                    {"type": "tool_use", "id": "b", "name": "Bash", "input": {"prompt": "not a sub-agent"}},
                    {"type": "tool_use", "id": "c", "name": "Task", "input": {"prompt": "second"}})
    for piece in (1, 5, 64, len(data)):
        assert read(data, piece) == ["first \"quoted\" ünï", "second"]


def test_an_input_over_the_cap_or_not_json_is_never_read() -> None:
    huge = streamed({"type": "tool_use", "id": "a", "name": "Agent", "input": {"prompt": "x" * MAX_LINE_BYTES}},
                    chunk=MAX_LINE_BYTES // 2)
    assert read(huge, 65536) == []
    whole = streamed({"type": "tool_use", "id": "a", "name": "Agent", "input": {"prompt": "p"}}, chunk=1000)
    broken = whole.replace(b'\\"p\\"}', b'\\"p\\"')  # the input JSON never closes
    assert broken != whole and read(whole, 7) == ["p"]
    assert read(broken, 7) == []


def test_the_opening_is_the_last_text_after_reminders_only() -> None:
    def first(*texts: str) -> JsonObject:
        return {"messages": [{"role": "user", "content": [{"type": "text", "text": t} for t in texts]}]}

    assert opening(first("<system-reminder>\ndate</system-reminder>", "do it")).prompt == "do it"
    assert opening({"messages": [{"role": "user", "content": "do it"}]}).prompt == "do it"
    assert opening(first("injected text", "do it")).prompt is None
    assert opening({"messages": [{"role": "assistant", "content": "do it"}]}).prompt is None
    marked = first("do it")
    marked["messages"][0]["content"][0]["cache_control"] = {"type": "ephemeral"}
    assert opening(marked).digests == opening(first("do it")).digests  # the moving cache marker is no change
    answered = {"messages": [*first("do it")["messages"], {"role": "assistant", "content": "ok"}]}
    assert opening(answered).answered and not opening(first("do it")).answered
