"""The fail-closed check of the Chat Completions requests a resumed OpenCode sends (pure).

First request: ``[system, <the rebuilt session>, {"role": "user", "content": NONCE}]`` and nothing after the
nonce. Later requests: the same, followed by the live continuation (kept). The gate requires the nonce exactly
once and exactly in that message, a ``tool`` message right before it, one leading ``system`` message (its
date-masked hash must equal the manifest's when it has one, and stay the same across requests), the manifest's
model and tool list (a ``question`` tool means the session lost its ``permission``), and ``messages[1:i]``
equal to the manifest message by message (a refusal names the first difference). It refuses OpenCode's
step-limit message and any ``[Tool execution was interrupted]`` result. The nonce message is stripped (or, with
a boundary prompt, its text becomes the prompt).

Title-generation requests (no ``tools``) are auxiliary: forwarded unchanged, not a step, unless they carry the
nonce (OpenCode sends none on a resumed session).
"""

from __future__ import annotations

from typing import Any

from forkpoint.adapters.opencode.envelope import (
    INTERRUPTED,
    PROFILES,
    STEP_LIMIT_TEXT,
    OpenCodeExpectedPrefix,
    describe,
    masked_system_sha256,
    project_request_message,
)
from forkpoint.bridge.gate import (
    Refusal,
    Verdict,
    checked,
    nonce_position,
    open_request,
    refuse_nonce_in,
    verified_profile,
)
from forkpoint.hashing import canonical_sha256, count_text
from forkpoint.model import JsonObject


def clean_request(expected: OpenCodeExpectedPrefix, body: Any, boundary_prompt: str | None, *, first: bool,
                  facts: JsonObject, system_seen: str | None = None) -> JsonObject:
    verified_profile(PROFILES, expected.version, expected.profile, "OpenCode")
    nonce = expected.nonce
    body, messages = open_request(body, nonce=nonce, boundary_prompt=boundary_prompt)
    envelope = {"role": "user", "content": nonce}
    i = nonce_position(messages, lambda message: message == envelope,
                       "the resume nonce is not the exact content of a user message {role, content}", facts)
    if first and i != len(messages) - 1:
        raise Refusal(f"message {i + 1} ({messages[i + 1].get('role')}) follows the resume nonce; the first request "
                       "must end with it")
    _check_top(expected, body, facts)
    system = messages[0] if messages else {}
    if system.get("role") != "system" or not isinstance(system.get("content"), str) or set(system) != {"role",
                                                                                                        "content"}:
        raise Refusal("messages[0] is not OpenCode's single system message")
    masked = masked_system_sha256(system["content"])
    facts["system_sha256"] = masked
    if expected.system_sha256 is not None and masked != expected.system_sha256:
        raise Refusal("the system prompt (date line masked) differs from the expected one")
    if system_seen is not None and masked != system_seen:
        raise Refusal("the system prompt changed since the first request")
    if i < 2 or messages[i - 1].get("role") != "tool":
        raise Refusal("the message before the resume nonce is not a tool result")
    _compare(expected, messages[1:i])
    for index, message in enumerate(messages):
        content = message.get("content")
        if message.get("role") == "assistant" and isinstance(content, str) and content.startswith(STEP_LIMIT_TEXT):
            raise Refusal(f"message {index} is OpenCode's step-limit message (agent.build.steps must stay unset)")
        if message.get("role") == "tool" and content == INTERRUPTED:
            raise Refusal(f"message {index} is an interrupted tool result")
    tail = [{"role": "user", "content": boundary_prompt}] if boundary_prompt is not None else []
    facts["boundary_prompt"] = bool(tail)
    continuation = messages[i + 1:]
    if not first:
        facts["continuation_messages"] = len(continuation)
    cleaned = {**body, "messages": [*messages[:i], *tail, *continuation]}
    refuse_nonce_in(tail, nonce)  # messages[i], the nonce's only place, is not in the cleaned copy
    facts["message_count"] = expected.message_count
    facts["prefix_sha256"] = expected.prefix_sha256
    return cleaned


def _check_top(expected: OpenCodeExpectedPrefix, body: JsonObject, facts: JsonObject) -> None:
    if body.get("model") != expected.model:
        raise Refusal(f"the request asks for model {body.get('model')!r}, expected {expected.model!r}")
    tools = body.get("tools")
    names = [t.get("function", {}).get("name") if isinstance(t, dict) else None for t in tools] \
        if isinstance(tools, list) else None
    if names != list(expected.tools):
        raise Refusal(f"the offered tools {names} differ from OpenCode's build tools {list(expected.tools)}")
    facts["tools"] = len(names)
    for field in ("previous_response_id", "conversation"):
        if body.get(field) is not None:
            raise Refusal(f"the request sets {field!r}: the upstream would add history the gate cannot check")


def _compare(expected: OpenCodeExpectedPrefix, conversation: list[JsonObject]) -> None:
    projected = [project_request_message(m) for m in conversation]
    for position in range(min(len(projected), expected.message_count)):
        if canonical_sha256(projected[position]) == expected.message_sha256[position]:
            continue
        role, want = projected[position].get("role"), expected.message_roles[position]
        detail = f"it is a {role} message, expected {want}" if role != want else \
            f"{describe(projected, position)} differs from the rebuilt session"
        raise Refusal(f"messages[{position + 1}]: {detail}")
    if len(projected) != expected.message_count:
        raise Refusal(f"the request has {len(projected)} messages between the system prompt and the nonce, the "
                       f"rebuilt session {expected.message_count}")
    if canonical_sha256(projected) != expected.prefix_sha256:
        raise Refusal("the canonical prefix hash differs from the rebuilt session")


class OpenCodeGate:
    """OpenAI Chat Completions requests from a resumed OpenCode (``@ai-sdk/openai-compatible`` provider)."""

    name = "openai-chat"
    model_routes = frozenset({"/v1/chat/completions", "/chat/completions"})

    def __init__(self, expected: OpenCodeExpectedPrefix, boundary_prompt: str | None = None) -> None:
        self.expected = expected
        self.boundary_prompt = boundary_prompt
        self._system: str | None = None

    def _run(self, body: Any, first: bool) -> Verdict:
        def clean(facts: JsonObject) -> JsonObject:
            cleaned = clean_request(self.expected, body, self.boundary_prompt, first=first, facts=facts,
                                    system_seen=self._system)
            self._system = facts["system_sha256"]
            return cleaned

        return checked(self.expected.profile, first, clean)

    def first(self, body: Any) -> Verdict:
        return self._run(body, True)

    def later(self, body: Any) -> Verdict:
        return self._run(body, False)

    def auxiliary(self, body: Any) -> Verdict | None:
        """A title request (no tools) is forwarded unchanged, unless it carries the nonce."""
        if not isinstance(body, dict) or body.get("tools"):
            return None

        def clean(facts: JsonObject) -> JsonObject:
            facts["auxiliary"] = "no-tools helper request (title generation)"
            if count_text(body, self.expected.nonce):
                raise Refusal("a helper request (no tools) carries the resume nonce")
            return body

        return checked(self.expected.profile, False, clean)
