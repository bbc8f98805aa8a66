"""Sampling pins (``--model``, ``--temperature``, ``--top-p``, ``--seed``, ``--max-output-tokens``,
``--disable-thinking``, ``--reasoning-effort``) applied to a request body after the gate validated it.

Pins go on the body that leaves the bridge, in that body's protocol: with a translating upstream that is the
Chat body. Each change is returned for the run's metadata. A pin the protocol has no field for is refused
(``UnsupportedPin``) so the CLI can say so before a run starts, instead of a pin silently doing nothing:
Anthropic has no ``seed`` and no ``reasoning_effort``; the Responses API has no ``seed`` and turns reasoning
down with ``reasoning.effort`` (``--reasoning-effort``), not ``--disable-thinking``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from forkpoint.core.model import JsonObject
from forkpoint.core.protocols import load

MISSING = "<absent>"
Put = Callable[[str, Any], None]


class UnsupportedPin(ValueError):
    """A pin the target protocol cannot express."""


@dataclass(frozen=True)
class SamplingPins:
    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    max_output_tokens: int | None = None
    disable_thinking: bool = False
    reasoning_effort: str | None = None

    def __post_init__(self) -> None:
        if self.model is not None and not self.model.strip():
            raise ValueError("--model must not be empty")
        if self.temperature is not None and not 0 <= self.temperature <= 2:
            raise ValueError("--temperature must be within [0, 2]")
        if self.top_p is not None and not 0 <= self.top_p <= 1:
            raise ValueError("--top-p must be within [0, 1]")
        if self.max_output_tokens is not None and self.max_output_tokens < 1:
            raise ValueError("--max-output-tokens must be at least 1")


@dataclass(frozen=True)
class Change:
    """One field the bridge set: ``before`` is ``MISSING`` when the agent had not sent it."""

    field: str
    before: Any
    after: Any

    def as_json(self) -> JsonObject:
        return {"field": self.field, "before": self.before, "after": self.after}


def apply_pins(protocol: str, body: JsonObject, pins: SamplingPins) -> tuple[JsonObject, list[Change]]:
    """A copy of ``body`` with the pins set in ``protocol`` (a registered name), and what changed (fields already
    at the pinned value are not listed).

    Copy on write: only the objects on a pinned field's path are copied, the rest (messages, tools: nearly all of
    a request) is shared with ``body``, which is never modified. Treat both as read-only."""
    out = dict(body)
    changes: list[Change] = []

    def put(path: str, value: Any) -> None:
        *parents, leaf = path.split(".")
        node = out
        for name in parents:
            child = node.get(name)
            child = dict(child) if isinstance(child, dict) else {}
            node[name] = child
            node = child
        before = node.get(leaf, MISSING)
        if before != value or leaf not in node:
            node[leaf] = value
            changes.append(Change(path, before, value))

    if pins.model is not None:
        put("model", pins.model)
    if pins.temperature is not None:
        put("temperature", pins.temperature)
    if pins.top_p is not None:
        put("top_p", pins.top_p)
    load(protocol).pins(out, pins, put, changes)  # the fields that differ: the protocol's spec sets them
    return out, changes


def anthropic_pins(out: JsonObject, pins: SamplingPins, put: Put, changes: list[Change]) -> None:
    if pins.seed is not None:
        raise UnsupportedPin("the Anthropic Messages API has no seed")
    if pins.reasoning_effort is not None:
        raise UnsupportedPin("--reasoning-effort is for the Responses and Chat APIs")
    if pins.max_output_tokens is not None:
        put("max_tokens", pins.max_output_tokens)
    if pins.disable_thinking:
        put("thinking", {"type": "disabled"})
        _drop_thinking_edits(out, changes)
    thinking = out.get("thinking")
    budget = thinking.get("budget_tokens") if isinstance(thinking, dict) else None
    max_tokens = out.get("max_tokens")
    if isinstance(budget, int) and isinstance(max_tokens, int) and budget >= max_tokens:
        raise UnsupportedPin(f"max_tokens {max_tokens} must exceed the thinking budget {budget}")


def _drop_thinking_edits(out: JsonObject, changes: list[Change]) -> None:
    """The API refuses ``clear_thinking_*`` context edits when thinking is off (Claude Code sends one)."""
    management = out.get("context_management")
    edits = management.get("edits") if isinstance(management, dict) else None
    if not isinstance(management, dict) or not isinstance(edits, list):
        return
    kept = [edit for edit in edits
            if not (isinstance(edit, dict) and str(edit.get("type", "")).startswith("clear_thinking"))]
    if len(kept) == len(edits):
        return
    if kept:
        changes.append(Change("context_management.edits", edits, kept))
        out["context_management"] = {**management, "edits": kept}
    else:
        changes.append(Change("context_management", out.pop("context_management"), MISSING))


def chat_pins(out: JsonObject, pins: SamplingPins, put: Put, changes: list[Change]) -> None:
    if pins.seed is not None:
        put("seed", pins.seed)
    if pins.max_output_tokens is not None:
        fields = [name for name in ("max_completion_tokens", "max_tokens") if name in out] or ["max_tokens"]
        for name in fields:
            put(name, pins.max_output_tokens)
    if pins.disable_thinking:
        put("chat_template_kwargs.enable_thinking", False)
    if pins.reasoning_effort is not None:
        put("reasoning_effort", pins.reasoning_effort)


def responses_pins(out: JsonObject, pins: SamplingPins, put: Put, changes: list[Change]) -> None:
    if pins.seed is not None:
        raise UnsupportedPin("the Responses API has no seed")
    if pins.disable_thinking:
        raise UnsupportedPin("the Responses API turns reasoning down with --reasoning-effort")
    if pins.max_output_tokens is not None:
        put("max_output_tokens", pins.max_output_tokens)
    if pins.reasoning_effort is not None:
        put("reasoning.effort", pins.reasoning_effort)
