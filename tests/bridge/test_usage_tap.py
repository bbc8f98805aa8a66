"""usage_tap.py: the usage a pass-through answer reports, read from its bytes in any split (no recorded upstream
answers exist in tests/fixtures: the streams here are the protocols' documented shapes and the bytes forkpoint's
own encoders, shared with ScriptedModel, put on the wire)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forkpoint.bridge.protocols import anthropic, openai_chat, openai_responses
from forkpoint.bridge.translate.usage import Usage
from forkpoint.bridge.usage_tap import MAX_USAGE_BYTES, UsageTap, normalise, usage_of

#: Anthropic's streaming example shape: usage in message_start (input, cache) and message_delta (final output)
ANTHROPIC_SSE = (
    b'event: message_start\ndata: {"type": "message_start", "message": {"id": "msg_1", "type": "message", '
    b'"role": "assistant", "content": [], "model": "claude-x", "stop_reason": null, "stop_sequence": null, '
    b'"usage": {"input_tokens": 25, "cache_creation_input_tokens": 10, "cache_read_input_tokens": 2000, '
    b'"output_tokens": 1}}}\n\n'
    b'event: content_block_start\ndata: {"type": "content_block_start", "index": 0, '
    b'"content_block": {"type": "text", "text": ""}}\n\n'
    b'event: ping\ndata: {"type": "ping"}\n\n'
    b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", '
    b'"text": "the field \\"usage\\": {\\"input_tokens\\": 999999} is text"}}\n\n'
    b'event: content_block_stop\ndata: {"type": "content_block_stop", "index": 0}\n\n'
    b'event: message_delta\ndata: {"type": "message_delta", "delta": {"stop_reason": "end_turn", '
    b'"stop_sequence": null}, "usage": {"output_tokens": 15}}\n\n'
    b'event: message_stop\ndata: {"type": "message_stop"}\n\n'
)
#: the Responses API: ``usage: null`` until response.completed
RESPONSES_SSE = (
    b'event: response.created\ndata: {"type":"response.created","sequence_number":0,"response":{"id":"resp_1",'
    b'"status":"in_progress","output":[],"usage":null}}\n\n'
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","sequence_number":1,'
    b'"item_id":"msg_1","output_index":0,"content_index":0,"delta":"hi"}\n\n'
    b'event: response.completed\ndata: {"type":"response.completed","sequence_number":2,"response":{"id":"resp_1",'
    b'"status":"completed","output":[],"usage":{"input_tokens":1200,"input_tokens_details":{"cached_tokens":1024},'
    b'"output_tokens":80,"output_tokens_details":{"reasoning_tokens":64},"total_tokens":1280}}}\n\n'
)
#: Chat Completions with stream_options.include_usage: a last chunk with ``choices: []`` before [DONE]
CHAT_SSE = (
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant",'
    b'"content":""},"finish_reason":null}]}\r\n\r\n'
    b': keep-alive\r\n\r\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}'
    b'\r\n\r\n'
    b'data: {"id":"c1","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":50,'
    b'"completion_tokens":7,"total_tokens":57,"prompt_tokens_details":{"cached_tokens":32}}}\r\n\r\n'
    b'data: [DONE]\r\n\r\n'
)
EXPECTED = {
    "anthropic": Usage(input=2035, output=15, cached=2000),
    "responses": Usage(input=1200, output=80, cached=1024, reasoning=64),
    "chat": Usage(input=50, output=7, cached=32),
}
STREAMS = {"anthropic": ANTHROPIC_SSE, "responses": RESPONSES_SSE, "chat": CHAT_SSE}


def tapped(wire: bytes, size: int) -> Usage | None:
    tap = UsageTap()
    for start in range(0, len(wire), size):
        tap.feed(wire[start:start + size])
    return tap.usage


@pytest.mark.parametrize("protocol", sorted(STREAMS))
@pytest.mark.parametrize("size", [1, 2, 6, 7, 8, 61, 4096])
def test_each_protocols_stream_in_any_split(protocol: str, size: int) -> None:
    assert tapped(STREAMS[protocol], size) == EXPECTED[protocol]


@settings(max_examples=60, deadline=None)
@given(protocol=st.sampled_from(sorted(STREAMS)), cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=12))
def test_arbitrary_splits_read_the_same(protocol: str, cuts: list[int]) -> None:
    wire = STREAMS[protocol]
    points = sorted({0, len(wire), *(c % (len(wire) + 1) for c in cuts)})
    tap = UsageTap()
    for start, end in itertools.pairwise(points):
        tap.feed(wire[start:end])
    assert tap.usage == EXPECTED[protocol]


def test_the_bytes_scripted_model_streams() -> None:
    """forkpoint's encoders (ScriptedModel answers with them: 100 input tokens per call)."""
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [],
               "usage": {"input_tokens": 100, "output_tokens": 1, "cache_creation_input_tokens": 0,
                         "cache_read_input_tokens": 0}}
    wire = b"".join(anthropic.encode(anthropic.message_events(message, [{"type": "text", "text": "x" * 200}],
                                                              "end_turn", 37)))
    assert tapped(wire, 5) == Usage(input=100, output=37)
    usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 12,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 112}
    items = [openai_responses.message_item("msg_1", "y" * 100)]
    wire = b"".join(openai_responses.encode(openai_responses.response_events(
        openai_responses.envelope_of("resp_1", "m"), items, usage)))
    assert tapped(wire, 9) == Usage(input=100, output=12)
    chat = {"role": "assistant", "content": "z" * 100}
    chunks = openai_chat.chat_chunks("c1", "m", chat, "stop", include_usage=True)
    assert tapped(b"".join(openai_chat.encode(chunks)), 3) == Usage(
        input=100, output=openai_chat.usage_for(chat)["completion_tokens"])
    assert tapped(b"".join(openai_chat.encode(openai_chat.chat_chunks("c1", "m", chat, "stop", False))), 3) is None


def test_vllm_usage_on_every_chunk_keeps_the_last_cumulative_counts() -> None:
    wire = b"".join(b'data: {"choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":9,"completion_tokens":%d}}'
                    b"\n\n" % n for n in range(1, 6))
    assert tapped(wire, 10) == Usage(input=9, output=5)


def test_whole_json_answers_pretty_printed_or_not() -> None:
    completion = {"id": "c", "choices": [{"message": {"content": "usage"}}],
                  "usage": {"prompt_tokens": 5, "completion_tokens": 2}}
    assert usage_of(json.dumps(completion, indent=2).encode()) == Usage(5, 2).as_json()
    assert usage_of(json.dumps(completion, separators=(",", ":")).encode()) == Usage(5, 2).as_json()
    assert usage_of(b'{"type": "error", "error": {"type": "overloaded_error"}}') is None


@pytest.mark.parametrize("wire", [
    b'{"usage": null, "x": 1}',
    b'{"usage": 12}',
    b'{"name": "usage", "input": {}}',  # a tool named usage: a value, not a member
    b'{"text": "\\"usage\\": {\\"prompt_tokens\\": 5}"}',  # escaped quotes: answer text
    b'{"usage_details": {"prompt_tokens": 5}, "total_usage": {"prompt_tokens": 5}}',
    b'{"usage": {"prompt_tokens": 5, "broken',  # cut off
])
def test_what_is_not_a_usage_object(wire: bytes) -> None:
    assert usage_of(wire) is None


def test_an_oversized_usage_object_is_skipped_and_never_held() -> None:
    tap = UsageTap()
    tap.feed(b'{"usage": {"pad": "' + b"x" * MAX_USAGE_BYTES)
    assert tap.held_bytes < len(b'"usage"')
    tap.feed(b'"}, "later": {"usage": {"input_tokens": 4, "output_tokens": 2}}}')
    assert tap.usage == Usage(4, 2)


def test_hostile_counts_read_as_zero_and_braces_in_strings_do_not_confuse() -> None:
    assert usage_of(b'{"usage": {"prompt_tokens": -5, "completion_tokens": "7", "x": "}{}}"}}') == Usage().as_json()
    assert usage_of(b'{"usage": {"k": "a\\\\", "prompt_tokens": 3}}') == Usage(3).as_json()


def test_normalise_recognises_the_protocol_by_its_keys() -> None:
    assert normalise({"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 4}}) == Usage(10, 0, 4)
    assert normalise({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 4}}) == Usage(10, 0, 4)
    assert normalise({"input_tokens": 6, "cache_read_input_tokens": 4}) == Usage(10, 0, 4)
    assert normalise({"input_tokens": 6, "output_tokens": 1}) == Usage(6, 1)
