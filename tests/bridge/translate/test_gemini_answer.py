"""gemini_answer.py: streamed Chat chunks -> Gemini ``GenerateContentResponse`` SSE chunks as they arrive (a call
whole once its arguments are), the finish and usage last; the whole-completion form; broken answers fail in
Google's error shape."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forkpoint.bridge.secret import UpstreamKey
from forkpoint.bridge.translate.common import TranslationError
from forkpoint.bridge.translate.gemini_answer import chat_completion_to_gemini
from forkpoint.bridge.translate.pipeline import AnswerStream, prepare, whole_answer

from .test_anthropic_answer import call_args, call_start, chunk, usage_chunk

ROUTE = "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
BODY: dict[str, Any] = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def sse(*chunks: Any) -> bytes:
    return b"".join(b"data: " + (c if isinstance(c, bytes) else json.dumps(c).encode()) + b"\n\n" for c in chunks)


def stream(data: bytes, *, split: int | None = None, key: UpstreamKey | None = None) -> tuple[list[Any], AnswerStream]:
    """The agent's SSE bytes for ``data`` (fed whole or ``split`` bytes at a time), decoded: each event must be an
    unnamed ``data:`` line, as Gemini's ``alt=sse`` frames it."""
    answer = AnswerStream(prepare("google-generate-content", BODY, route=ROUTE), answer_id="forkpoint-r1", key=key)
    pieces = [data] if split is None else [data[i:i + split] for i in range(0, len(data), split)]
    out = b"".join(answer.feed(piece) for piece in pieces) + answer.close()
    events = []
    for frame in out.split(b"\n\n")[:-1]:
        assert frame.startswith(b"data: ") and b"\n" not in frame, frame
        events.append(json.loads(frame[6:]))
    assert out.endswith(b"\n\n")
    return events, answer


def parts(events: list[Any]) -> list[Any]:
    return [part for event in events if "candidates" in event
            for part in event["candidates"][0]["content"]["parts"]]


def test_text_thoughts_and_calls_stream_as_parts_and_the_last_chunk_has_the_finish_and_usage() -> None:
    data = sse(chunk({"reasoning_content": "think"}), chunk({"content": "Hel"}), chunk({"content": "lo"}),
               call_start(0, "call_a", "read_file", '{"file_'), call_args(0, 'path": "a.py"}'),
               call_start(1, "call_b", "list_directory"), chunk(finish="tool_calls"),
               usage_chunk(prompt=120, completion=30, cached=100), b"[DONE]")
    events, answer = stream(data)
    assert parts(events) == [{"text": "think", "thought": True}, {"text": "Hel"}, {"text": "lo"},
                             {"functionCall": {"name": "read_file", "args": {"file_path": "a.py"}, "id": "call_a"}},
                             {"functionCall": {"name": "list_directory", "args": {}, "id": "call_b"}}]
    last = events[-1]
    assert last["candidates"][0]["finishReason"] == "STOP" and last["candidates"][0]["content"]["parts"] == []
    assert last["usageMetadata"] == {"promptTokenCount": 120, "candidatesTokenCount": 30, "totalTokenCount": 150,
                                     "cachedContentTokenCount": 100}
    assert all(e["modelVersion"] == "gemini-2.5-pro" and e["responseId"] == "forkpoint-r1" for e in events)
    assert "finishReason" not in json.dumps(events[:-1]) and answer.error is None and answer.losses == []
    assert (answer.usage.input, answer.usage.output, answer.usage.cached) == (120, 30, 100)
    # any split of the upstream bytes gives the same events
    assert stream(data, split=7)[0] == events


def test_each_text_delta_is_written_as_it_arrives_and_a_call_once_its_arguments_are_whole() -> None:
    answer = AnswerStream(prepare("google-generate-content", BODY, route=ROUTE), answer_id="r")
    assert b'"text":"Hel"' in answer.feed(sse(chunk({"content": "Hel"})))
    assert answer.feed(sse(call_start(0, "c", "f", '{"a":'))) == b""
    assert b'"functionCall"' in answer.feed(sse(call_args(0, "1}"), chunk(finish="tool_calls")))


@pytest.mark.parametrize(("finish", "reason", "lost"), [("length", "MAX_TOKENS", False),
                                                         ("content_filter", "SAFETY", False),
                                                         ("eos", "STOP", True)])
def test_finish_reasons(finish: str, reason: str, lost: bool) -> None:
    events, answer = stream(sse(chunk({"content": "x"}), chunk(finish=finish), b"[DONE]"))
    assert events[-1]["candidates"][0]["finishReason"] == reason
    assert bool(answer.losses) is lost


def test_arguments_that_are_not_a_json_object_are_sent_as_text_and_listed() -> None:
    events, answer = stream(sse(call_start(0, "c", "f", "[1, 2]"), call_start(1, "d", "g", "{broken"),
                                chunk(finish="tool_calls"), b"[DONE]"))
    assert [p["functionCall"]["args"] for p in parts(events)] == [{"arguments": "[1, 2]"},
                                                                 {"arguments": "{broken"}]
    assert len(answer.losses) == 3  # two not-an-object, one not-JSON (the sequencer's)


@pytest.mark.parametrize("data", [
    sse(chunk({"content": "half"})),  # the body ends without a finish
    sse(chunk({"content": "x"}), {"error": {"message": "overloaded"}}),
    sse(chunk({"content": "x"}), chunk(finish="abort")),
    b"data: {not json\n\n",
    sse({"choices": [{"index": 1, "delta": {}}]}),
])
def test_a_broken_answer_ends_with_a_google_error_object(data: bytes) -> None:
    events, answer = stream(data)
    assert answer.done and answer.error
    assert set(events[-1]) == {"error"} and events[-1]["error"]["code"] == 500
    assert events[-1]["error"]["status"] == "INTERNAL" and events[-1]["error"]["message"]


def test_the_upstream_key_never_reaches_the_agent_even_split_across_deltas() -> None:
    key = "sk-upstream-SECRET-0123456789"
    data = sse(chunk({"content": "the key is sk-upstream-SE"}), chunk({"content": "CRET-0123456789 ok"}),
               call_start(0, "c", "f", json.dumps({"k": key})), chunk(finish="stop"), b"[DONE]")
    events, _ = stream(data, key=UpstreamKey(key))
    text = json.dumps(events)
    assert "SECRET" not in text and "the key is" in text and " ok" in text


def test_a_whole_completion() -> None:
    completion = {"choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": "ok", "reasoning_content": "hmm",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]}}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 4,
                  "completion_tokens_details": {"reasoning_tokens": 1}}}
    prepared = prepare("google-generate-content", BODY, route="/v1beta/models/m:generateContent")
    answer, losses = whole_answer(prepared, json.dumps(completion).encode(), answer_id="r")
    candidate = answer["candidates"][0]
    assert candidate["content"]["parts"] == [{"text": "hmm", "thought": True}, {"text": "ok"},
                                             {"functionCall": {"name": "f", "args": {"a": 1}, "id": "c1"}}]
    assert candidate["finishReason"] == "STOP" and losses == []
    assert answer["usageMetadata"] == {"promptTokenCount": 10, "candidatesTokenCount": 3, "totalTokenCount": 14,
                                       "thoughtsTokenCount": 1}
    broken: dict[str, Any]
    for broken in ({"choices": []}, {"choices": [{"message": None}]},
                   {"choices": [{"message": {"tool_calls": [{"function": {"name": 3}}]}}]},
                   {"choices": [{"message": {"tool_calls": "x"}}]},
                   {"choices": [{"message": {"content": "x"}, "finish_reason": "error"}]}):
        with pytest.raises(TranslationError):
            chat_completion_to_gemini(broken, response_id="r", model="m")


KEYS = ["choices", "delta", "index", "content", "reasoning", "reasoning_content", "tool_calls", "function", "name",
        "arguments", "id", "finish_reason", "usage", "error", "message"]
WORDS = ["stop", "tool_calls", "length", "abort", "{", "}", '{"a":1}', "[1]", "f"]
leaf = st.one_of(st.none(), st.booleans(), st.integers(-1, 2), st.text(max_size=3), st.sampled_from(WORDS))
value = st.recursive(leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
                     max_leaves=15)


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.dictionaries(st.sampled_from(KEYS), value, max_size=4), max_size=6), st.booleans())
def test_any_answer_translates_or_fails_cleanly(chunks: list[dict[str, Any]], done: bool) -> None:
    """The stream always ends with a finish chunk or a Google error object, every event a valid frame."""
    events, answer = stream(sse(*chunks, *([b"[DONE]"] if done else [])))
    assert answer.done and events
    last = events[-1]
    assert set(last) == {"error"} or last["candidates"][0].get("finishReason")
