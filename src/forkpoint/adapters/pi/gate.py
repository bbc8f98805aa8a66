"""The fail-closed check of the Chat Completions requests a resumed Pi 0.83.0 sends (pure).

Measured on the real package (docs/adapters/pi.md, tests/fixtures/pi/): with the recorded provider/model
configured, the SDK sends ``messages`` = the system prompt, then the session's context converted by Pi's
``openai-completions`` provider, and nothing else:

* ``session.agent.continue()``: no envelope at all. The first request ends with the ``tool`` messages of batch N.
* ``session.prompt(NONCE)``: exactly one appended ``{"role":"user","content":[{"type":"text","text":NONCE}]}``,
  which the gate replaces by the boundary prompt (same shape), so the prompt text never enters Pi's files.

The expected prefix is computed from the rebuilt session's messages the way Pi converts them (``pi_projection``,
mirroring ``convertMessages`` for a same-model history: assistant text joined, ``reasoning_content`` from the
thinking blocks, tool calls with parsed arguments, tool results as their joined text), and compared with the
request's messages (``wire_projection``): count, per-message hashes, prefix hash, call ids, observation hashes,
boundary call ids. The system prompt is not in the session, so it is not compared (its hash is a fact).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from forkpoint.bridge.gate import Gate, Refusal, Verdict, checked, open_request, refuse_nonce_in
from forkpoint.hashing import canonical_sha256
from forkpoint.model import JsonObject

PROFILE = "pi/0.83.0/openai-completions-sdk-v1"
_REASONING_KEYS = ("reasoning_content", "reasoning", "reasoning_text")
_SKIPPED_STOPS = frozenset({"error", "aborted"})


@dataclass(frozen=True)
class PiExpectedPrefix:
    profile: str
    nonce: str | None  # set when the continuation uses prompt(NONCE)
    message_roles: tuple[str, ...]
    message_sha256: tuple[str, ...]
    prefix_sha256: str
    call_ids: tuple[str, ...]
    observation_sha256: tuple[tuple[str, str], ...]
    boundary_call_ids: tuple[str, ...]
    model: str | None = None  # the recorded model id the request must ask for
    tools: tuple[str, ...] | None = None  # the recorded enabled tool names, in the order Pi sends them

    @property
    def message_count(self) -> int:
        return len(self.message_sha256)

    def to_json(self) -> JsonObject:
        return {"profile": self.profile, "nonce_used": self.nonce is not None,
                "message_roles": list(self.message_roles), "message_sha256": list(self.message_sha256),
                "prefix_sha256": self.prefix_sha256, "call_ids": list(self.call_ids),
                "observation_sha256": [list(pair) for pair in self.observation_sha256],
                "boundary_call_ids": list(self.boundary_call_ids), "model": self.model,
                "tools": None if self.tools is None else list(self.tools)}


# -- projections -------------------------------------------------------------------------------------------------


def _texts(content: Any) -> list[JsonObject]:
    return [b for b in content if isinstance(b, dict) and b.get("type") == "text"] if isinstance(content, list) else []


def pi_projection(messages: Sequence[JsonObject]) -> list[JsonObject]:
    """What Pi's openai-completions provider sends for these session messages (same model, default compat)."""
    out: list[JsonObject] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "user":
            if isinstance(content, str):
                out.append({"role": "user", "content": content})
            elif isinstance(content, list) and content:
                blocks = [{"type": "text", "text": b.get("text")} if b.get("type") == "text" else
                          {"type": "image_url"} for b in content if isinstance(b, dict)]
                out.append({"role": "user", "content": blocks})
        elif role == "assistant":
            if message.get("stopReason") in _SKIPPED_STOPS:
                continue
            blocks = content if isinstance(content, list) else []
            text = "".join(str(b.get("text")) for b in _texts(blocks) if str(b.get("text", "")).strip())
            thinking = [b for b in blocks if isinstance(b, dict) and b.get("type") == "thinking"
                        and str(b.get("thinking", "")).strip()]
            reasoning = None
            if thinking and thinking[0].get("thinkingSignature"):
                reasoning = "\n".join(str(b.get("thinking")) for b in thinking)
            calls = [{"id": b.get("id"), "name": b.get("name"), "arguments": b.get("arguments")}
                     for b in blocks if isinstance(b, dict) and b.get("type") == "toolCall"]
            if not text and not calls:
                continue
            out.append({"role": "assistant", "content": text or None, "reasoning": reasoning, "tool_calls": calls})
        elif role == "toolResult":
            joined = "\n".join(str(b.get("text")) for b in _texts(content))
            has_images = isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "image"
                                                           for b in content)
            text = joined or ("(see attached image)" if has_images else "(no tool output)")
            out.append({"role": "tool", "tool_call_id": message.get("toolCallId"), "content": text})
    return out


def wire_projection(messages: Sequence[JsonObject], offset: int) -> list[JsonObject]:
    """The request's conversation messages in the same shape as ``pi_projection``."""
    out: list[JsonObject] = []
    for position, message in enumerate(messages):
        role = message.get("role")
        if role == "user":
            out.append({"role": "user", "content": message.get("content")})
        elif role == "assistant":
            reasoning = next((message[k] for k in _REASONING_KEYS if isinstance(message.get(k), str)), None)
            calls = []
            for call in message.get("tool_calls") or []:
                function = call.get("function") if isinstance(call, dict) else None
                if not isinstance(function, dict):
                    raise Refusal(f"messages[{offset + position}] has a tool call that is not a function call")
                arguments = function.get("arguments")
                try:
                    parsed = orjson.loads(arguments) if isinstance(arguments, str) else arguments
                except orjson.JSONDecodeError:
                    parsed = arguments
                calls.append({"id": call.get("id"), "name": function.get("name"), "arguments": parsed})
            content = message.get("content")
            out.append({"role": "assistant", "content": content if content else None, "reasoning": reasoning,
                        "tool_calls": calls})
        elif role == "tool":
            out.append({"role": "tool", "tool_call_id": message.get("tool_call_id"),
                        "content": message.get("content")})
        else:
            raise Refusal(f"messages[{offset + position}] has role {role!r}, which a Pi session never produces there")
    return out


def expected_prefix(messages: Sequence[JsonObject], nonce: str | None, model: str | None = None,
                    tools: Sequence[str] | None = None) -> PiExpectedPrefix:
    projected = pi_projection(messages)
    if not projected or projected[-1]["role"] != "tool":
        raise ValueError("a rebuilt Pi prefix must end with the tool results of its last batch")
    calls = tuple(str(c["id"]) for m in projected if m["role"] == "assistant" for c in m["tool_calls"])
    observations = tuple((str(m["tool_call_id"]), canonical_sha256(m["content"])) for m in projected
                         if m["role"] == "tool")
    boundary: list[str] = []
    for message in reversed(projected):
        if message["role"] != "tool":
            break
        boundary.insert(0, str(message["tool_call_id"]))
    return PiExpectedPrefix(PROFILE, nonce, tuple(m["role"] for m in projected),
                            tuple(canonical_sha256(m) for m in projected), canonical_sha256(projected), calls,
                            observations, tuple(boundary), model, None if tools is None else tuple(tools))


# -- the gate ------------------------------------------------------------------------------------------------------


def clean_request(expected: PiExpectedPrefix, body: Any, boundary_prompt: str | None, *, first: bool) -> Verdict:
    return checked(expected.profile, first,
                   lambda facts: _clean(expected, body, boundary_prompt, first=first, facts=facts))


def _clean(expected: PiExpectedPrefix, body: Any, boundary_prompt: str | None, *, first: bool,
           facts: JsonObject) -> JsonObject:
    if (boundary_prompt is None) != (expected.nonce is None):
        raise Refusal("the gate was configured inconsistently (a boundary prompt needs the resume nonce)")
    body, messages = open_request(body, nonce=expected.nonce, boundary_prompt=boundary_prompt,
                                  checks=lambda checked_body: _check_model(expected, checked_body))
    start = 1 if messages and messages[0].get("role") in ("system", "developer") else 0
    if start:
        facts["system_prompt_sha256"] = canonical_sha256(messages[0].get("content"))
    count = expected.message_count
    end = start + count
    conversation = messages[start:end]
    _compare(expected, wire_projection(conversation, start), start, len(messages) - start)
    rest = messages[end:]
    cleaned_tail: list[JsonObject] = []
    if expected.nonce is not None:
        assert boundary_prompt is not None
        if not rest or rest[0] != _nonce_message(expected.nonce):
            raise Refusal(f"messages[{end}] is not exactly the resume prompt message right after the boundary "
                          "tool results")
        cleaned_tail.append(_nonce_message(boundary_prompt))
        rest = rest[1:]
        facts["nonce_index"] = end
    facts["boundary_prompt"] = expected.nonce is not None
    if first and rest:
        raise Refusal(f"messages[{len(messages) - len(rest)}] ({rest[0].get('role')!r}) follows the boundary; the "
                      "first request must end with the boundary tool results"
                      + (" and the resume prompt" if expected.nonce else ""))
    if not first:
        facts["continuation_messages"] = len(rest)
    cleaned = {**body, "messages": [*messages[:end], *cleaned_tail, *rest]}
    if expected.nonce is not None:  # messages[end], the nonce's only place, is not in the cleaned copy
        refuse_nonce_in(cleaned_tail, expected.nonce)
    facts["message_count"] = count
    facts["prefix_sha256"] = expected.prefix_sha256
    return cleaned


def _check_model(expected: PiExpectedPrefix, body: JsonObject) -> None:
    if expected.model is not None and body.get("model") != expected.model:
        raise Refusal(f"the request asks for model {body.get('model')!r}, the recording used {expected.model!r}")
    if expected.tools is not None and _tool_names(body.get("tools")) != expected.tools:
        raise Refusal(f"the request offers the tools {_tool_names(body.get('tools'))}, the recording had "
                      f"{list(expected.tools)} (Pi's enabled tool set)")


def _tool_names(tools: Any) -> tuple[str | None, ...] | None:
    """The function names a Chat Completions ``tools`` array offers (None when it is not an array)."""
    if tools is None:
        return ()
    if not isinstance(tools, list):
        return None
    functions = [t.get("function") if isinstance(t, dict) else None for t in tools]
    return tuple(f.get("name") if isinstance(f, dict) and isinstance(f.get("name"), str) else None
                 for f in functions)


def _nonce_message(text: str) -> JsonObject:
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def _compare(expected: PiExpectedPrefix, projected: list[JsonObject], offset: int, available: int) -> None:
    """Refuse unless ``projected`` is exactly the rebuilt session's conversation; name the first difference."""
    count = expected.message_count
    if available < count:
        raise Refusal(f"the request has {available} conversation messages, the rebuilt session {count}: message "
                      f"{available} ({expected.message_roles[available]}) is missing")
    for position, message in enumerate(projected):
        if canonical_sha256(message) == expected.message_sha256[position]:
            continue
        want = expected.message_roles[position]
        where = f"messages[{offset + position}] (conversation message {position})"
        if message["role"] != want:
            raise Refusal(f"{where} has role {message['role']!r}, expected {want!r}")
        if message["role"] == "tool":
            raise Refusal(f"{where}: the observation of {message['tool_call_id']} differs from the rebuilt session")
        raise Refusal(f"{where} differs from the rebuilt session")
    if canonical_sha256(projected) != expected.prefix_sha256:
        raise Refusal("the canonical prefix hash differs from the rebuilt session")
    calls = tuple(str(c["id"]) for m in projected if m["role"] == "assistant" for c in m["tool_calls"])
    if calls != expected.call_ids:
        raise Refusal(f"tool call ids differ: expected {list(expected.call_ids)}, got {list(calls)}")
    observations = tuple((str(m["tool_call_id"]), canonical_sha256(m["content"])) for m in projected
                         if m["role"] == "tool")
    if observations != expected.observation_sha256:
        raise Refusal("the tool observation hashes differ from the rebuilt session")
    boundary = [str(m["tool_call_id"]) for m in projected[len(projected) - len(expected.boundary_call_ids):]]
    if tuple(boundary) != expected.boundary_call_ids or projected[-1]["role"] != "tool":
        raise Refusal(f"boundary tool results differ: expected {list(expected.boundary_call_ids)}, got {boundary}")


class PiGate(Gate):
    """Chat Completions requests from Pi's SDK continuation (``<bridge>/v1`` + ``/chat/completions``)."""

    name = "openai-chat"
    model_routes = frozenset({"/v1/chat/completions", "/chat/completions"})

    def __init__(self, expected: PiExpectedPrefix, boundary_prompt: str | None = None) -> None:
        self.expected = expected
        self.boundary_prompt = boundary_prompt

    def first(self, body: Any) -> Verdict:
        return clean_request(self.expected, body, self.boundary_prompt, first=True)

    def later(self, body: Any) -> Verdict:
        return clean_request(self.expected, body, self.boundary_prompt, first=False)
