"""The same scripted turn, answered natively by ScriptedModel (the stand-in real Claude Code and Codex accept
end to end) and answered over Chat Completions then translated, gives the agent the same content in events of
the same shapes. Pure: ScriptedModel's wire functions are called without a server."""

from __future__ import annotations

import json
from typing import Any

from forkpoint.bridge.protocols.anthropic import message_events as sse_events
from forkpoint.bridge.protocols.openai_chat import chat_chunks, chat_message, sse_data
from forkpoint.bridge.protocols.openai_responses import response_events as responses_sse_events
from forkpoint.bridge.translate.anthropic_answer import ChatToAnthropicStream
from forkpoint.bridge.translate.chat_stream import SSEDecoder
from forkpoint.bridge.translate.responses_answer import ChatToResponsesStream
from forkpoint.testing.scripted_model import text, thinking, tool_use

PATCH = "*** Begin Patch\n*** Add File: a.txt\n+" + "x" * 120 + "\n*** End Patch\n"
BLOCKS = [thinking("I will look first.", signature=""), text("Listing the files. " * 5),
          tool_use("Bash", {"command": "ls -la " + "y" * 90, "description": "List"}, id="call_1"),
          tool_use("Read", {"file_path": "/tmp/a"}, id="call_2")]
Event = tuple[str, dict[str, Any]]


def chat_wire(blocks: list[dict[str, Any]]) -> bytes:
    """What ScriptedModel's Chat Completions endpoint writes for these blocks (48-char pieces, usage chunk)."""
    message, finish = chat_message(blocks, lambda index: f"call_{index}")
    chunks = chat_chunks("chatcmpl-1", "m", message, finish, include_usage=True)
    return b"".join(sse_data(chunk) for chunk in chunks) + sse_data("[DONE]")


def translate(wire: bytes, stream: ChatToAnthropicStream | ChatToResponsesStream) -> list[Event]:
    decoder = SSEDecoder()
    events: list[Event] = []
    for i in range(0, len(wire), 97):  # arbitrary network splits
        for payload in decoder.feed(wire[i:i + 97]):
            events += stream.feed(payload)
    for payload in decoder.close():
        events += stream.feed(payload)
    return events + stream.end()


def shapes(events: list[Event], ignored: frozenset[str] = frozenset()) -> set[tuple[str, frozenset[str], str]]:
    found = set()
    for name, data in events:
        inner = data.get("content_block") or data.get("delta") or data.get("item")
        keys = set(inner) - ignored if isinstance(inner, dict) else set()
        found.add((name, frozenset(data) - ignored, str(sorted(keys))))
    return found


def anthropic_blocks(events: list[Event]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    for name, data in events:
        if name == "content_block_start":
            blocks.append(dict(data["content_block"]))
        elif name == "content_block_delta":
            delta, block = data["delta"], blocks[data["index"]]
            if delta["type"] == "input_json_delta":
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
            else:
                field = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature"}
                key = field[delta["type"]]
                block[key] += delta[key]
        elif name == "content_block_stop" and data["index"] in partial:
            blocks[data["index"]]["input"] = json.loads(partial[data["index"]])
    return blocks


def test_claude_gets_the_same_message_either_way() -> None:
    message: dict[str, Any] = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
               "stop_reason": None, "stop_sequence": None,
               "usage": {"input_tokens": 0, "output_tokens": 0, "cache_creation_input_tokens": 0,
                         "cache_read_input_tokens": 0}}
    native = list(sse_events(message, BLOCKS, "tool_use", 10))
    translated = translate(chat_wire(BLOCKS), ChatToAnthropicStream(message_id="msg_1", model="m"))
    assert anthropic_blocks(translated) == anthropic_blocks(native) == BLOCKS
    assert shapes(translated) == shapes(native)
    assert translated[-2][1]["delta"]["stop_reason"] == "tool_use"
    assert translated[-2][1]["usage"]["input_tokens"] == 100


def test_codex_gets_the_same_items_either_way() -> None:
    blocks = [BLOCKS[0], BLOCKS[1], tool_use("exec_command", {"cmd": "ls"}, id="call_1"),
              tool_use("apply_patch", {"input": PATCH}, id="call_2")]
    native_items: list[dict[str, Any]] = [
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": BLOCKS[0]["thinking"]}],
         "encrypted_content": None},
        {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
         "content": [{"type": "output_text", "text": BLOCKS[1]["text"], "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "status": "completed", "name": "exec_command",
         "arguments": json.dumps({"cmd": "ls"}), "call_id": "call_1"},
        {"type": "custom_tool_call", "id": "ctc_1", "status": "completed", "name": "apply_patch", "input": PATCH,
         "call_id": "call_2"}]
    envelope = {"id": "resp_1", "object": "response", "created_at": 0, "status": "in_progress", "model": "m",
                "output": [], "usage": None}
    native = [(name, {"type": name, "sequence_number": number, **data}) for number, (name, data) in
              enumerate(responses_sse_events(envelope, native_items, {"input_tokens": 1}))]
    stream = ChatToResponsesStream(response_id="resp_1", model="m", custom_tools=frozenset({"apply_patch"}))
    translated = translate(chat_wire(blocks), stream)

    def without_ids(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in item.items() if k != "id"} for item in items]

    assert without_ids(translated[-1][1]["response"]["output"]) == without_ids(native_items)
    extra = frozenset({"logprobs", "tool_choice", "tools", "parallel_tool_calls"})
    assert shapes(translated, extra) == shapes(native, extra)
