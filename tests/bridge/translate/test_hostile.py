"""Hostile or broken input never crashes a translator: requests are refused with ``TranslationError``, upstream
answers end in the protocol's failure event, pins are applied or refused with ``UnsupportedPin``."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from forkpoint.bridge.translate.anthropic_chat import anthropic_to_chat
from forkpoint.bridge.translate.common import ChatOptions, TranslationError
from forkpoint.bridge.translate.pipeline import AnswerStream, prepare
from forkpoint.bridge.translate.responses_chat import responses_to_chat
from forkpoint.bridge.translate.sampling import SamplingPins, UnsupportedPin, apply_pins

WORDS = ["user", "assistant", "system", "developer", "text", "image", "tool_use", "tool_result", "thinking",
         "document", "base64", "url", "message", "function_call", "reasoning", "function_call_output",
         "custom_tool_call", "input_text", "output_text", "input_image", "tool", "any", "auto", "function", "custom",
         "grammar", "json_schema", "tool_reference", "search_result", "local_shell_call", "summary_text", "stop",
         "tool_calls", "length", "abort", "{", "}", '{"a":1}', "[DONE]", "clear_thinking_x", "enabled"]
KEYS = ["type", "role", "content", "text", "source", "media_type", "data", "url", "id", "name", "input",
        "tool_use_id", "is_error", "thinking", "signature", "title", "call_id", "arguments", "output", "summary",
        "encrypted_content", "image_url", "input_schema", "parameters", "format", "definition", "effort", "tool_name",
        "choices", "delta", "index", "reasoning", "reasoning_content", "tool_calls", "function", "finish_reason",
        "usage", "error", "message", "edits", "budget_tokens", "max_tokens", "chat_template_kwargs"]
leaf = st.one_of(st.none(), st.booleans(), st.integers(-2, 3), st.text(max_size=3), st.sampled_from(WORDS))
value = st.recursive(leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                     st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
                     max_leaves=15)
FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))


@FUZZ
@given(st.fixed_dictionaries({"model": st.just("m")}, optional={
    name: value for name in ("messages", "system", "tools", "tool_choice", "stop_sequences", "input",
                             "instructions", "text", "reasoning", "stream")}), st.booleans())
def test_requests_translate_or_are_refused(body: dict[str, Any], strict: bool) -> None:
    """Anything but ``TranslationError`` escapes and fails the test; a translated body is a Chat body."""
    results = []
    for translate in (lambda: anthropic_to_chat(body, ChatOptions(strict_system=strict)),
                      lambda: responses_to_chat(body, ChatOptions(strict_system=strict))):
        try:
            results.append(translate())
        except TranslationError as error:
            assert str(error)
    for translated in results:
        assert translated.body["model"] == "m" and isinstance(translated.body["messages"], list)
        assert all(message["role"] in ("system", "user", "assistant", "tool")
                   for message in translated.body["messages"])


def test_the_item_type_that_crashed_the_fuzzer_is_refused() -> None:
    with pytest.raises(TranslationError):
        responses_to_chat({"model": "m", "input": [{"type": []}]})


@FUZZ
@given(st.lists(st.dictionaries(st.sampled_from(KEYS), value, max_size=4), max_size=6),
       st.sampled_from(["anthropic-messages", "openai-responses"]))
def test_answers_translate_or_fail_cleanly(chunks: list[dict[str, Any]], protocol: Any) -> None:
    body = {"model": "m", "messages": [], "input": "x", "stream": True}
    agent = {k: v for k, v in body.items() if k != ("input" if protocol == "anthropic-messages" else "messages")}
    answer = AnswerStream(prepare(protocol, agent), answer_id="a")
    out = b"".join(answer.feed(b"data: " + json.dumps(chunk).encode() + b"\n\n") for chunk in chunks)
    out += answer.feed(b"data: [DONE]\n\n") + answer.close()
    assert answer.done and out.endswith(b"\n\n")
    last = out.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
    assert last.split(b"\n")[0] in (b"event: message_stop", b"event: error", b"event: response.completed",
                                    b"event: response.incomplete", b"event: response.failed")


@FUZZ
@given(st.dictionaries(st.sampled_from(KEYS), value, max_size=5),
       st.builds(SamplingPins, model=st.sampled_from([None, "x"]), temperature=st.sampled_from([None, 0.5]),
                 seed=st.sampled_from([None, 3]), max_output_tokens=st.sampled_from([None, 100]),
                 disable_thinking=st.booleans(), reasoning_effort=st.sampled_from([None, "low"])),
       st.sampled_from(["anthropic-messages", "openai-chat", "openai-responses"]))
def test_pins_apply_or_are_refused(body: dict[str, Any], pins: SamplingPins, protocol: Any) -> None:
    try:
        out, changes = apply_pins(protocol, body, pins)
    except UnsupportedPin as refusal:
        assert str(refusal)
        return
    if pins.model is not None:
        assert out["model"] == pins.model
    if pins.temperature is not None:
        assert out["temperature"] == pins.temperature
    assert all(change.after != change.before for change in changes)


@pytest.mark.parametrize("completion,message", [
    ({}, "a completion without exactly one choice"),
    ({"choices": [{}, {}]}, "a completion without exactly one choice"),
    ({"choices": ["x"]}, "a completion without exactly one choice"),
    ({"choices": [{"message": "x"}]}, "a completion choice without a message"),
])
def test_a_whole_completion_without_one_choice_and_its_message_is_refused_by_every_answer_translator(
        completion: dict[str, Any], message: str) -> None:
    """common.only_choice, read first by the Anthropic, Gemini and Responses answer translators."""
    from forkpoint.bridge.translate.anthropic_answer import chat_completion_to_anthropic
    from forkpoint.bridge.translate.gemini_answer import chat_completion_to_gemini
    from forkpoint.bridge.translate.responses_answer import completion_chunks

    for translate in (lambda: chat_completion_to_anthropic(completion, message_id="m", model="x"),
                      lambda: chat_completion_to_gemini(completion, response_id="r", model="x"),
                      lambda: completion_chunks(completion)):
        with pytest.raises(TranslationError, match=f"^{message}$"):
            translate()
