"""pipeline.py: the bytes-in/bytes-out core a translating upstream drives, on real recorded agent requests."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forkpoint.bridge.protocols.openai_chat import chat_chunks, chat_completion, chat_message, sse_data
from forkpoint.bridge.secret import REDACTED_TEXT, UpstreamKey
from forkpoint.bridge.translate.common import TranslationError
from forkpoint.bridge.translate.pipeline import AnswerStream, prepare, whole_answer
from forkpoint.bridge.translate.sampling import SamplingPins
from forkpoint.testing.scripted_model import text, tool_use

FIXTURES = Path(__file__).parents[2] / "fixtures"
CLAUDE = FIXTURES / "claude_code" / "requests" / "2.1.332" / "parallel_after_2" / "first_request.json"
CODEX = FIXTURES / "codex" / "requests" / "0.149.0" / "apply_patch_after_1" / "first_request.json"
PINS = SamplingPins(model="qwen3-8b", temperature=0.0, seed=7, disable_thinking=True)
Check = Callable[[dict[str, Any]], None]


def parse_sse(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in raw.decode().strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def wire(blocks: list[dict[str, Any]]) -> bytes:
    message, finish = chat_message(blocks, lambda index: f"call_{index}")
    return b"".join(sse_data(c) for c in chat_chunks("c1", "qwen3-8b", message, finish, True)) + sse_data("[DONE]")


def test_prepare_a_real_claude_request_with_pins(chat_request_valid: Check) -> None:
    prepared = prepare("anthropic-messages", json.loads(CLAUDE.read_text()), PINS)
    chat_request_valid(prepared.body)
    assert prepared.model == "qwen3-8b" and prepared.stream
    assert prepared.body["temperature"] == 0.0 and prepared.body["seed"] == 7
    assert prepared.body["chat_template_kwargs"] == {"enable_thinking": False}
    assert [c.field for c in prepared.changes] == ["model", "temperature", "seed",
                                                   "chat_template_kwargs.enable_thinking"]
    assert "thinking signature dropped" not in prepared.losses and prepared.losses


def test_prepare_a_real_codex_request() -> None:
    prepared = prepare("openai-responses", json.loads(CODEX.read_text()), SamplingPins(reasoning_effort="low"))
    assert prepared.custom_tools == {"apply_patch"} and prepared.body["reasoning_effort"] == "low"


def test_pins_go_on_the_chat_body() -> None:
    """A seed is a Chat field: pinned for Claude Code too once its request is translated (Anthropic has none)."""
    prepared = prepare("anthropic-messages", json.loads(CLAUDE.read_text()),
                       SamplingPins(seed=1, max_output_tokens=2048))
    assert prepared.body["seed"] == 1 and prepared.body["max_tokens"] == 2048
    assert "thinking" not in prepared.body


@pytest.mark.parametrize("split", [1, 7, 10_000])
def test_answer_bytes_for_claude(split: int) -> None:
    prepared = prepare("anthropic-messages", json.loads(CLAUDE.read_text()), PINS)
    answer = AnswerStream(prepared, answer_id="msg_1")
    data = wire([text("Running."), tool_use("Bash", {"command": "echo four"}, id="toolu_x")])
    out = b"".join(answer.feed(data[i:i + split]) for i in range(0, len(data), split)) + answer.close()
    events = parse_sse(out)
    assert events[0][0] == "message_start" and events[-1][0] == "message_stop"
    assert events[0][1]["message"]["model"] == "qwen3-8b"
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use" and answer.error is None and answer.done
    assert answer.usage.input == 100


def test_answer_bytes_for_codex() -> None:
    prepared = prepare("openai-responses", json.loads(CODEX.read_text()))
    answer = AnswerStream(prepared, answer_id="resp_1")
    patch = "*** Begin Patch\n*** Add File: b.txt\n+b\n*** End Patch\n"
    out = answer.feed(wire([tool_use("apply_patch", {"input": patch}, id="call_p")])) + answer.close()
    events = parse_sse(out)
    assert events[-1][0] == "response.completed"
    assert events[-1][1]["response"]["output"][0]["input"] == patch
    assert events[-1][1]["response"]["tool_choice"] == "auto"


def test_an_unreadable_upstream_stream_fails_the_answer_once() -> None:
    answer = AnswerStream(prepare("anthropic-messages", {"model": "m", "messages": [], "stream": True}), answer_id="m")
    first = parse_sse(answer.feed(b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n'))
    failed = parse_sse(answer.feed(b"data: {broken\n\n"))
    assert [n for n, _ in first] == ["message_start", "content_block_start", "content_block_delta"]
    assert [n for n, _ in failed] == ["error"] and answer.error and "not JSON" in answer.error
    assert answer.feed(b'data: {"choices": []}\n\n') == b"" and answer.close() == b""


def test_a_stream_cut_before_the_finish_fails_at_close() -> None:
    answer = AnswerStream(prepare("openai-responses", {"model": "m", "input": "hi", "stream": True}),
                          answer_id="r")
    answer.feed(b'data: {"choices": [{"index": 0, "delta": {"content": "a"}}]}\n\n')
    events = parse_sse(answer.close())
    assert events[-1][0] == "response.failed" and answer.error == "the model server's stream ended before a " \
        "finish_reason"


def test_whole_answers() -> None:
    message, finish = chat_message([text("done")], str)
    completion = json.dumps(chat_completion("c1", "m", message, finish)).encode()
    anthropic, _ = whole_answer(prepare("anthropic-messages", {"model": "m", "messages": []}), completion,
                                answer_id="msg")
    assert anthropic["content"] == [{"type": "text", "text": "done"}] and anthropic["stop_reason"] == "end_turn"
    responses, _ = whole_answer(prepare("openai-responses", {"model": "m", "input": "x"}), completion,
                                answer_id="resp")
    assert responses["output"][0]["content"][0]["text"] == "done"
    with pytest.raises(TranslationError):
        whole_answer(prepare("anthropic-messages", {"model": "m", "messages": []}), b"<html>", answer_id="m")


KEY = "sk-proj-Key0123456789abcdefKEY"


def keyed_wire(blocks: list[dict[str, Any]], delta_size: int) -> bytes:
    """The answer as a Chat server streams it, every text cut into deltas of ``delta_size`` characters."""
    message, finish = chat_message(blocks, lambda index: f"call_{index}")
    chunks = chat_chunks("c1", "qwen3-8b", message, finish, True, chunk_size=delta_size)
    return b"".join(sse_data(c) for c in chunks) + sse_data("[DONE]")


def anthropic_texts(out: bytes) -> dict[str, str]:
    """The concatenated text of each delta kind, as Claude Code assembles them."""
    texts: dict[str, str] = {}
    for name, event in parse_sse(out):
        if name == "content_block_delta":
            delta = event["delta"]
            field = {"text_delta": "text", "thinking_delta": "thinking", "input_json_delta": "partial_json"}.get(
                delta["type"])
            if field:
                texts[delta["type"]] = texts.get(delta["type"], "") + delta[field]
    return texts


@given(delta_size=st.integers(min_value=1, max_value=40), cuts=st.lists(st.integers(0, 4000), max_size=8))
@settings(max_examples=60, deadline=None)
def test_the_key_split_across_deltas_and_chunks_never_reaches_claude(delta_size: int, cuts: list[int]) -> None:
    answer = AnswerStream(prepare("anthropic-messages", {"model": "m", "messages": [], "stream": True}), answer_id="m",
                          key=UpstreamKey(KEY))
    blocks = [{"type": "thinking", "thinking": f"the header was Bearer {KEY}"},
              text(f"Authorization: Bearer {KEY} and {KEY[:5]}, s"),
              tool_use("Bash", {"command": f"echo {KEY}"}, id="toolu_k")]
    data = keyed_wire(blocks, delta_size)
    bounds = sorted({min(cut, len(data)) for cut in cuts} | {0, len(data)})
    out = b"".join(answer.feed(data[a:b]) for a, b in itertools.pairwise(bounds)) + answer.close()
    assert KEY.encode() not in out and answer.error is None and answer.done
    assert anthropic_texts(out) == {
        "thinking_delta": f"the header was Bearer {REDACTED_TEXT}",
        "text_delta": f"Authorization: Bearer {REDACTED_TEXT} and {KEY[:5]}, s",
        "input_json_delta": json.dumps({"command": f"echo {REDACTED_TEXT}"})}


@pytest.mark.parametrize("delta_size", [3, 11])
def test_the_key_split_across_deltas_never_reaches_codex(delta_size: int) -> None:
    answer = AnswerStream(prepare("openai-responses", {"model": "m", "input": "hi", "stream": True}),
                          answer_id="r", key=UpstreamKey(KEY))
    out = answer.feed(keyed_wire([text(f"Bearer {KEY}!")], delta_size)) + answer.close()
    assert KEY.encode() not in out
    deltas = "".join(e["delta"] for n, e in parse_sse(out) if n == "response.output_text.delta")
    assert deltas == f"Bearer {REDACTED_TEXT}!"
    assert parse_sse(out)[-1][1]["response"]["output"][0]["content"][0]["text"] == deltas


@pytest.mark.parametrize("protocol", ["anthropic-messages", "openai-responses"])
def test_a_mid_stream_error_quoting_the_key_is_redacted(protocol: str) -> None:
    body = {"model": "m", "messages": [], "stream": True} if protocol == "anthropic-messages" else {
        "model": "m", "input": "hi", "stream": True}
    answer = AnswerStream(prepare(protocol, body), answer_id="a", key=UpstreamKey(KEY))
    out = answer.feed(b'data: {"choices": [{"index": 0, "delta": {"content": "sk-pr"}}]}\n\n'
                      + b'data: {"error": {"message": "bad key ' + KEY.encode() + b'"}}\n\n') + answer.close()
    assert KEY.encode() not in out and answer.done
    assert f"bad key {REDACTED_TEXT}".encode() in out


def test_a_short_key_changes_nothing() -> None:
    """A local server's dummy key ("EMPTY") is no secret: the answer passes unchanged."""
    data = wire([text("EMPTY answers are EMPTY")])
    plain = AnswerStream(prepare("anthropic-messages", {"model": "m", "messages": [], "stream": True}), answer_id="m")
    keyed = AnswerStream(prepare("anthropic-messages", {"model": "m", "messages": [], "stream": True}), answer_id="m",
                         key=UpstreamKey("EMPTY"))
    assert keyed.feed(data) + keyed.close() == plain.feed(data) + plain.close()


@pytest.mark.parametrize("chunk", [b'data: {"error": {"message": "overloaded"}}\n\n',
                                   b'data: {"choices": [{"index": 0, "delta": {}, "finish_reason": "abort"}]}\n\n'])
@pytest.mark.parametrize(("protocol", "route"), [("anthropic-messages", ""), ("openai-responses", ""),
                                                 ("google-generate-content", "/v1beta/models/m:streamGenerateContent")])
def test_a_failure_fed_mid_stream_is_the_answers_error(protocol: str, route: str, chunk: bytes) -> None:
    """An error chunk or a failed finish ends the answer while it is fed: ``error`` says so after ``close`` (the
    translating upstream records the request as a failed answer), not only a failure found at the end."""
    bodies: dict[str, dict[str, Any]] = {
        "anthropic-messages": {"model": "m", "messages": [], "stream": True},
        "openai-responses": {"model": "m", "input": "hi", "stream": True},
        "google-generate-content": {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}}
    body = bodies[protocol]
    answer = AnswerStream(prepare(protocol, body, route=route), answer_id="a")
    answer.feed(b'data: {"choices": [{"index": 0, "delta": {"content": "half"}}]}\n\n' + chunk)
    assert answer.done
    answer.close()
    assert answer.error is not None and ("overloaded" in answer.error or "abort" in answer.error), answer.error
