"""sampling.py: pins per protocol, the list of changes, refusals for pins a protocol cannot express."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.bridge.translate.sampling import MISSING, Change, SamplingPins, UnsupportedPin, apply_pins

FIXTURES = Path(__file__).parents[2] / "fixtures"


def claude_request() -> dict[str, Any]:
    path = FIXTURES / "claude_code" / "requests" / "2.1.332" / "parallel_after_2" / "first_request.json"
    body: dict[str, Any] = json.loads(path.read_text())
    return body


def test_anthropic_pins_on_a_real_claude_request() -> None:
    body = claude_request()
    before = json.dumps(body)
    out, changes = apply_pins("anthropic-messages", body, SamplingPins(model="other", temperature=0.0, top_p=0.9,
                                                            max_output_tokens=4096, disable_thinking=True))
    assert json.dumps(body) == before  # the input is not modified
    assert out["model"] == "other" and out["temperature"] == 0.0 and out["top_p"] == 0.9
    assert out["max_tokens"] == 4096 and out["thinking"] == {"type": "disabled"}
    # Claude Code's clear_thinking context edit is refused by the API without thinking: removed and recorded
    assert "context_management" not in out
    fields = [change.field for change in changes]
    assert fields == ["model", "temperature", "top_p", "max_tokens", "thinking", "context_management"]
    assert changes[0] == Change("model", "claude-opus-5-5", "other")
    assert changes[1].before == MISSING
    assert out["messages"] == body["messages"]


def test_unchanged_values_are_not_listed() -> None:
    out, changes = apply_pins("openai-chat", {"model": "m", "temperature": 0.0}, SamplingPins(model="m",
                                                                                               temperature=0.0))
    assert out == {"model": "m", "temperature": 0.0} and changes == []


def test_chat_pins() -> None:
    body = {"model": "m", "max_completion_tokens": 10, "chat_template_kwargs": {"foo": 1}}
    out, changes = apply_pins("openai-chat", body, SamplingPins(seed=7, max_output_tokens=99, disable_thinking=True,
                                                                reasoning_effort="low"))
    assert out == {"model": "m", "max_completion_tokens": 99, "seed": 7, "reasoning_effort": "low",
                   "chat_template_kwargs": {"foo": 1, "enable_thinking": False}}
    assert [c.as_json()["field"] for c in changes] == ["seed", "max_completion_tokens",
                                                       "chat_template_kwargs.enable_thinking", "reasoning_effort"]
    out, _ = apply_pins("openai-chat", {"model": "m"}, SamplingPins(max_output_tokens=5))
    assert out["max_tokens"] == 5


def test_responses_pins() -> None:
    body = {"model": "gpt-5.5", "reasoning": {"effort": "medium", "summary": "auto"}}
    out, changes = apply_pins("openai-responses", body, SamplingPins(max_output_tokens=100, reasoning_effort="low"))
    assert out["reasoning"] == {"effort": "low", "summary": "auto"} and out["max_output_tokens"] == 100
    assert Change("reasoning.effort", "medium", "low") in changes


def test_nested_pins_never_modify_the_input() -> None:
    """Copy on write: the pinned objects are copies, the untouched rest is shared with the input."""
    chat: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                            "chat_template_kwargs": {"foo": 1}}
    responses: dict[str, Any] = {"model": "m", "reasoning": {"effort": "medium"}}
    anthropic: dict[str, Any] = {"model": "m", "max_tokens": 10, "context_management": {
        "edits": [{"type": "clear_thinking_20251015"}, {"type": "clear_tool_uses_20250919"}]}}
    cases: list[tuple[Any, dict[str, Any], SamplingPins]] = [
        ("openai-chat", chat, SamplingPins(disable_thinking=True)),
        ("openai-responses", responses, SamplingPins(reasoning_effort="low")),
        ("anthropic-messages", anthropic, SamplingPins(disable_thinking=True))]
    for protocol, body, pins in cases:
        before = json.dumps(body)
        out, changes = apply_pins(protocol, body, pins)
        assert json.dumps(body) == before and out != body and changes, protocol
    assert chat["chat_template_kwargs"] == {"foo": 1} and responses["reasoning"] == {"effort": "medium"}
    out, changes = apply_pins("openai-chat", chat, SamplingPins(disable_thinking=True))
    assert out["messages"] is chat["messages"]
    out, changes = apply_pins("anthropic-messages", anthropic, SamplingPins(disable_thinking=True))
    assert out["context_management"] == {"edits": [{"type": "clear_tool_uses_20250919"}]}
    assert Change("context_management.edits", anthropic["context_management"]["edits"],
                  out["context_management"]["edits"]) in changes
    assert len(anthropic["context_management"]["edits"]) == 2


@pytest.mark.parametrize(("protocol", "pins"), [
    ("anthropic-messages", SamplingPins(seed=1)),
    ("anthropic-messages", SamplingPins(reasoning_effort="low")),
    ("openai-responses", SamplingPins(seed=1)),
    ("openai-responses", SamplingPins(disable_thinking=True)),
])
def test_pins_a_protocol_cannot_express_are_refused(protocol: Any, pins: SamplingPins) -> None:
    with pytest.raises(UnsupportedPin):
        apply_pins(protocol, {"model": "m"}, pins)


def test_anthropic_max_tokens_must_exceed_the_thinking_budget() -> None:
    body = {"model": "m", "max_tokens": 8000, "thinking": {"type": "enabled", "budget_tokens": 4000}}
    with pytest.raises(UnsupportedPin, match="thinking budget"):
        apply_pins("anthropic-messages", body, SamplingPins(max_output_tokens=2000))


@pytest.mark.parametrize("bad", [dict(temperature=3.0), dict(top_p=-0.1), dict(max_output_tokens=0),
                                 dict(model=" ")])
def test_invalid_pins_are_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        SamplingPins(**bad)
