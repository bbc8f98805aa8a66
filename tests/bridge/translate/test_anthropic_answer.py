"""anthropic_answer.py: streamed Chat chunks -> Anthropic SSE events as they arrive; the whole-completion form."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forkpoint.bridge.translate.anthropic_answer import ChatToAnthropicStream, chat_completion_to_anthropic
from forkpoint.bridge.translate.anthropic_chat import anthropic_to_chat
from forkpoint.bridge.translate.chat_stream import SSEDecoder
from forkpoint.bridge.translate.common import DONE, TranslationError, dumps_arguments, sse_event

Event = tuple[str, dict[str, Any]]


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None) -> dict[str, Any]:
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]}


def usage_chunk(prompt: int = 120, completion: int = 30, cached: int | None = 100) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": completion,
                             "total_tokens": prompt + completion}
    if cached is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": cached}
    return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [], "usage": usage}


def call_start(index: int, call_id: str, name: str, arguments: str = "") -> dict[str, Any]:
    return chunk({"tool_calls": [{"index": index, "id": call_id, "type": "function",
                                  "function": {"name": name, "arguments": arguments}}]})


def call_args(index: int, arguments: str) -> dict[str, Any]:
    return chunk({"tool_calls": [{"index": index, "function": {"arguments": arguments}}]})


def run(chunks: list[Any]) -> tuple[list[Event], ChatToAnthropicStream]:
    stream = ChatToAnthropicStream(message_id="msg_1", model="m")
    events: list[Event] = []
    for item in chunks:
        events += stream.feed(item)
    return events + stream.end(), stream


def fold(events: list[Event]) -> dict[str, Any]:
    """What an Anthropic client builds from the events, checking the order rules on the way: message_start first,
    blocks one at a time with consecutive indexes, message_delta then message_stop last."""
    assert events[0][0] == "message_start"
    message = dict(events[0][1]["message"])
    blocks: list[dict[str, Any]] = []
    partial: dict[int, str] = {}
    open_index: int | None = None
    for name, data in events[1:]:
        assert data["type"] == name
        if name == "content_block_start":
            assert open_index is None and data["index"] == len(blocks)
            open_index = data["index"]
            blocks.append(dict(data["content_block"]))
        elif name == "content_block_delta":
            assert data["index"] == open_index
            delta, block = data["delta"], blocks[data["index"]]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "signature_delta":
                block["signature"] = delta["signature"]
            else:
                assert delta["type"] == "input_json_delta" and block["type"] == "tool_use"
                partial[data["index"]] = partial.get(data["index"], "") + delta["partial_json"]
        elif name == "content_block_stop":
            assert data["index"] == open_index
            if data["index"] in partial:
                blocks[data["index"]]["input"] = json.loads(partial[data["index"]])
            open_index = None
        elif name == "message_delta":
            assert open_index is None
            message.update(data["delta"])
            message["usage"] = data["usage"]
        elif name == "message_stop":
            assert (name, data) == events[-1]
        else:
            assert name == "error" and (name, data) == events[-1]
            message["error"] = data["error"]
    message["content"] = blocks
    return message


def test_text_reasoning_and_usage() -> None:
    events, _ = run([chunk({"role": "assistant", "content": ""}), chunk({"reasoning_content": "let me "}),
                     chunk({"reasoning_content": "think"}), chunk({"content": "Hel"}), chunk({"content": "lo"}),
                     chunk(finish="stop"), usage_chunk(), DONE])
    message = fold(events)
    assert message["content"] == [{"type": "thinking", "thinking": "let me think", "signature": ""},
                                  {"type": "text", "text": "Hello"}]
    assert message["stop_reason"] == "end_turn"
    assert message["usage"] == {"input_tokens": 20, "output_tokens": 30, "cache_creation_input_tokens": 0,
                                "cache_read_input_tokens": 100}
    assert [name for name, _ in events][-2:] == ["message_delta", "message_stop"]


def test_events_are_given_as_chunks_arrive_not_at_the_end() -> None:
    stream = ChatToAnthropicStream(message_id="msg_1", model="m")
    first = stream.feed(chunk({"role": "assistant"}))
    assert [name for name, _ in first] == ["message_start"]
    assert [d["delta"]["text"] for n, d in stream.feed(chunk({"content": "a"})) if n == "content_block_delta"] == ["a"]
    assert stream.feed(call_start(0, "call_1", "Bash", '{"comm'))[-1][1]["delta"] == {
        "type": "input_json_delta", "partial_json": '{"comm'}


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_both_reasoning_field_names(field: str) -> None:
    message = fold(run([chunk({field: "r"}), chunk({"content": "t"}), chunk(finish="stop"), DONE])[0])
    assert message["content"][0]["thinking"] == "r"


def test_duplicated_reasoning_fields_are_read_once() -> None:
    message = fold(run([chunk({"reasoning_content": "r", "reasoning": "r"}), chunk(finish="stop"), DONE])[0])
    assert message["content"] == [{"type": "thinking", "thinking": "r", "signature": ""}]


def test_a_tool_call_streamed_in_pieces() -> None:
    events, _ = run([chunk({"content": "Listing."}), call_start(0, "call_abc", "Bash"),
                     call_args(0, '{"command"'), call_args(0, ': "ls"}'), chunk(finish="tool_calls"),
                     usage_chunk(cached=None), DONE])
    message = fold(events)
    assert message["content"][1] == {"type": "tool_use", "id": "call_abc", "name": "Bash",
                                     "input": {"command": "ls"}}
    assert message["stop_reason"] == "tool_use" and message["usage"]["cache_read_input_tokens"] == 0


def answer_chunks(text: str, calls: list[tuple[str, dict[str, Any]]], piece: int, interleave: bool) -> list[Any]:
    """The same answer as a server could stream it: text, then tool calls with arguments cut into ``piece``-char
    parts, either one call after another (vLLM) or interleaved by index."""
    out: list[Any] = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": text[i:i + piece]}) for i in range(0, len(text), piece)]
    parts = []
    for index, (name, arguments) in enumerate(calls):
        encoded = json.dumps(arguments, ensure_ascii=False)
        pieces = [call_args(index, encoded[i:i + piece]) for i in range(0, len(encoded), piece)]
        parts.append([call_start(index, f"call_{index}", name), *pieces])
    if interleave:
        longest = max((len(p) for p in parts), default=0)
        out += [p[i] for i in range(longest) for p in parts if i < len(p)]
    else:
        out += [c for p in parts for c in p]
    return [*out, chunk(finish="tool_calls" if calls else "stop"), usage_chunk(), DONE]


arguments = st.dictionaries(st.text(min_size=1, max_size=5),
                            st.one_of(st.text(max_size=12), st.integers(), st.booleans(), st.none()), max_size=4)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=30), st.lists(st.tuples(st.sampled_from(["Bash", "Read", "Edit"]), arguments), max_size=4),
       st.integers(min_value=1, max_value=7), st.booleans())
def test_chunk_splitting_and_interleaving_do_not_change_the_answer(
        text: str, calls: list[tuple[str, dict[str, Any]]], piece: int, interleave: bool) -> None:
    message = fold(run(answer_chunks(text, calls, piece, interleave))[0])
    expected: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    expected += [{"type": "tool_use", "id": f"call_{i}", "name": name, "input": args}
                 for i, (name, args) in enumerate(calls)]
    assert message["content"] == expected
    assert message["stop_reason"] == ("tool_use" if calls else "end_turn")


def test_one_char_argument_pieces_give_the_same_input_as_one_piece() -> None:
    calls = [("Bash", {"command": "echo 'a b' | wc -c", "description": "Count ✓"})]
    whole = fold(run(answer_chunks("", calls, 10_000, False))[0])
    single = fold(run(answer_chunks("", calls, 1, False))[0])
    assert whole == single and single["content"][0]["input"] == calls[0][1]


def test_interleaved_calls_are_not_interleaved_blocks() -> None:
    events, _ = run([call_start(0, "a", "Bash", '{"x":'), call_start(1, "b", "Read", '{"y":'),
                     call_args(0, "1}"), call_args(1, "2}"), chunk(finish="tool_calls"), DONE])
    message = fold(events)  # fold asserts one open block at a time
    assert [b["input"] for b in message["content"]] == [{"x": 1}, {"y": 2}]


def test_whole_calls_in_one_delta_and_missing_ids() -> None:
    """Ollama-style: the whole call in one chunk, several calls in one delta, finish_reason stop."""
    delta = {"tool_calls": [{"index": 0, "function": {"name": "Bash", "arguments": '{"command":"ls"}'}},
                            {"index": 1, "id": "call_x", "function": {"name": "Read", "arguments": '{"p":1}'}}]}
    message = fold(run([chunk(delta), chunk(finish="stop"), DONE])[0])
    assert [(b["id"], b["input"]) for b in message["content"]] == [("toolu_fp_0", {"command": "ls"}),
                                                                  ("call_x", {"p": 1})]
    assert message["stop_reason"] == "tool_use"


def test_a_call_without_arguments_gets_an_empty_input() -> None:
    message = fold(run([call_start(0, "a", "get_goal"), chunk(finish="tool_calls"), DONE])[0])
    assert message["content"][0]["input"] == {}


@pytest.mark.parametrize(("finish", "reason"), [("stop", "end_turn"), ("length", "max_tokens"),
                                                ("content_filter", "refusal"), ("eos", "end_turn")])
def test_stop_reasons(finish: str, reason: str) -> None:
    events, stream = run([chunk({"content": "x"}), chunk(finish=finish), DONE])
    assert fold(events)["stop_reason"] == reason
    assert (finish == "eos") == bool(stream.losses)


def test_a_stream_without_done_still_finishes_at_its_end() -> None:
    message = fold(run([chunk({"content": "x"}), chunk(finish="stop")])[0])
    assert message["stop_reason"] == "end_turn"


@pytest.mark.parametrize("chunks", [
    [chunk({"content": "x"})],  # body ended before a finish_reason
    [chunk({"content": "x"}), {"error": {"message": "out of memory"}}],
    [chunk({"content": "x"}), chunk(finish="abort")],
    [chunk({"content": "x"}), DONE],
])
def test_failures_become_an_error_event(chunks: list[Any]) -> None:
    events, stream = run(chunks)
    assert events[-1][0] == "error" and stream.done
    assert fold(events)["error"]["type"] == "api_error"


def test_empty_answer() -> None:
    message = fold(run([chunk({"role": "assistant", "content": ""}), chunk(finish="stop"), DONE])[0])
    assert message["content"] == [] and message["stop_reason"] == "end_turn"


def test_protocol_violations_are_refused() -> None:
    with pytest.raises(TranslationError):
        run([call_start(0, "a", "Bash", "{}"), chunk({"content": "x"}), call_args(0, '"more"')])
    with pytest.raises(TranslationError):
        run([{"choices": [{"index": 1, "delta": {"content": "x"}}]}])
    with pytest.raises(TranslationError):
        run([chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}), chunk(finish="tool_calls")])
    stream = ChatToAnthropicStream(message_id="m", model="m")
    stream.feed(chunk(finish="stop"))
    stream.feed(DONE)
    with pytest.raises(TranslationError):
        stream.feed(chunk({"content": "late"}))


def test_sse_bytes_in_any_split_decode_to_the_same_events() -> None:
    chunks = answer_chunks("héllo", [("Bash", {"command": "ls"})], 2, False)
    wire = b": keep-alive\r\n\r\n" + b"".join(
        b"data: [DONE]\n\n" if c == DONE else b"data: " + json.dumps(c).encode() + b"\r\n\r\n" for c in chunks)
    for size in (1, 3, 64, len(wire)):
        decoder = SSEDecoder()
        decoded = [item for i in range(0, len(wire), size) for item in decoder.feed(wire[i:i + size])]
        assert decoded + decoder.close() == chunks


def test_sse_decoder_bounds_and_refusals() -> None:
    with pytest.raises(TranslationError):
        SSEDecoder(max_event_bytes=10).feed(b"data: " + b"x" * 20)
    with pytest.raises(TranslationError):
        SSEDecoder().feed(b"data: [1]\n\n")
    with pytest.raises(TranslationError):
        SSEDecoder().feed(b"data: {not json\n\n")
    assert SSEDecoder().feed(b'data: {"a":\ndata: 1}\n\n') == [{"a": 1}]


def test_sse_event_encoding() -> None:
    encoded = sse_event("message_stop", {"type": "message_stop", "é": 1})
    assert encoded == 'event: message_stop\ndata: {"type":"message_stop","é":1}\n\n'.encode()


def test_whole_completion() -> None:
    completion = {"id": "c", "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "ok", "reasoning": "hm",
        "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "Bash",
                                                                         "arguments": '{"command":"ls"}'}},
                       {"id": "call_2", "type": "function", "function": {"name": "Bad", "arguments": "{oops"}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
    message, losses = chat_completion_to_anthropic(completion, message_id="msg_1", model="m")
    assert message["content"] == [
        {"type": "thinking", "thinking": "hm", "signature": ""}, {"type": "text", "text": "ok"},
        {"type": "tool_use", "id": "call_1", "name": "Bash", "input": {"command": "ls"}},
        {"type": "tool_use", "id": "call_2", "name": "Bad", "input": {"arguments": "{oops"}}]
    assert message["stop_reason"] == "tool_use" and message["usage"]["input_tokens"] == 10
    assert losses == ["tool call 'Bad' arguments were not valid JSON: kept as a string"]
    with pytest.raises(TranslationError):
        chat_completion_to_anthropic({"choices": []}, message_id="m", model="m")


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=20), st.text(max_size=20),
       st.lists(st.tuples(st.sampled_from(["Bash", "Read"]), arguments), max_size=3), st.integers(1, 6))
def test_answer_round_trips_through_the_next_request(reasoning: str, text: str,
                                                      calls: list[tuple[str, dict[str, Any]]], piece: int) -> None:
    """Chat answer -> the Anthropic message Claude Code keeps and sends back -> the next Chat request: the
    assistant turn the model sees again is the one it produced."""
    chunks: list[Any] = [chunk({"reasoning_content": reasoning[i:i + piece]}) for i in range(0, len(reasoning),
                                                                                             piece)]
    chunks += answer_chunks(text, calls, piece, False)
    message = fold(run(chunks)[0])
    chat = anthropic_to_chat({"model": "m", "messages": [{"role": "assistant", "content": message["content"]}]})
    expected: dict[str, Any] = {"role": "assistant", "content": text if text or not calls else None}
    if reasoning:
        expected["reasoning_content"] = reasoning
    if calls:
        expected["tool_calls"] = [{"id": f"call_{i}", "type": "function",
                                   "function": {"name": name, "arguments": dumps_arguments(args)}}
                                  for i, (name, args) in enumerate(calls)]
    assert chat.body["messages"] == [expected] and chat.losses == ()


def test_usage_on_every_chunk_counts_the_last() -> None:
    """vLLM with continuous_usage_stats: every chunk carries the usage so far."""
    def with_usage(delta: dict[str, Any] | None, finish: str | None, completion: int) -> dict[str, Any]:
        return {**chunk(delta, finish), "usage": {"prompt_tokens": 10, "completion_tokens": completion}}

    message = fold(run([with_usage({"content": "a"}, None, 1), with_usage({"content": "b"}, None, 2),
                        with_usage(None, "stop", 3), DONE])[0])
    assert message["usage"]["output_tokens"] == 3 and message["content"] == [{"type": "text", "text": "ab"}]


def test_a_name_after_the_first_arguments_and_calls_without_index() -> None:
    """Arguments held until the call has a name; calls without ``index`` (Gemini-style proxies) keyed by id."""
    chunks = [chunk({"tool_calls": [{"index": 0, "id": "a", "function": {"arguments": '{"x"'}}]}),
              chunk({"tool_calls": [{"index": 0, "function": {"name": "Bash", "arguments": ": 1}"}}]}),
              chunk({"tool_calls": [{"id": "b", "function": {"name": "Read", "arguments": '{"y": 2}'}}]}),
              chunk({"tool_calls": [{"id": "c", "function": {"name": "Edit", "arguments": "{"}}]}),
              chunk({"tool_calls": [{"function": {"arguments": "}"}}]}),
              chunk(finish="tool_calls"), DONE]
    message = fold(run(chunks)[0])
    assert [(b["id"], b["name"], b["input"]) for b in message["content"]] == [
        ("a", "Bash", {"x": 1}), ("b", "Read", {"y": 2}), ("c", "Edit", {})]
