"""Claude Code's bridge gate (pure): recognise its resume envelope exactly, remove it, and prove the prefix.

Every ``/v1/messages`` body the resumed agent sends goes through here. The envelope (measured on 2.1.220 and
2.1.332, confirmed by the real captures in tests/fixtures/claude_code/requests/) is, after the last tool result
message ``k`` of the rebuilt session::

    messages[k]    user: the boundary tool_result blocks        (+ 2.1.220: text "Continue from where you left off.")
    messages[k+1]  assistant: [text "No response requested."]
    messages[k+2]  user: NONCE  (a string, or one text block with or without cache_control)
    messages[k+3:] role:"system" messages built by the resume turn (environment update, task reminder...)

The first request must end there; later requests continue after it (the real continuation). The gate strips
the envelope, optionally puts the configured boundary prompt where the nonce was, restores the cache marker the
original request had on its last block, and compares the canonical projection (envelope.project) with the
``ExpectedPrefix`` manifest. Any deviation is a refusal whose reason names the first differing message.

What the real captures showed (scripts/record_claude_requests.py; both versions, cut after 1 and 2 batches, a
parallel batch, a ``cd``): the envelope is exactly as documented, and the cleaned first request equals the
request the same binary sent right after batch N in the recording, byte for byte (cache marker included), except:

* 2.1.332 after a batch that ran ``cd``: the recorded request ended with a ``# Environment update`` system
  message (rendered from an attachment line written AFTER the tool_result, so the cut drops it); on resume a
  different ``# Environment update`` (cwd back to the workspace: the shell cwd is lost) follows the nonce and is
  stripped. Resuming from a cwd other than the recorded one also adds such a system message after the nonce.
* The nonce is one text block with cache_control while it is the last message, and a plain string in later
  requests (or when a system message follows it).
* 2.1.220 also sends its role:"system" attachment message with string content and a ``# currentDate``
  ``<system-reminder>`` block in front of the first prompt (built from today's date, not from the file); 2.1.332's
  system message carries an extra ``output_config`` key. The projection ignores all three.
* Outside the messages (not gated): 2.1.220's resumed ``system`` prompt and Bash tool description lose the
  "(1M context)" model naming (with the ``context-1m`` beta header) and its ``# Memory`` path names the new HOME.

Later requests also drop the run of role:"system" messages right after the nonce: they were stripped from the
first request, so the model never saw them and the later requests keep showing it the same conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType
from typing import Any

from forkpoint.adapters.claude_code.envelope import (
    CONTINUE_TEXT,
    NO_RESPONSE_TEXT,
    BlockDigest,
    EnvelopeProfile,
    ExpectedPrefix,
    digest_messages,
    gate_profile,
    is_reminder,
    project_indexed,
)
from forkpoint.bridge.gate import (
    PrefixGate,
    Refusal,
    Verdict,
    nonce_position,
    open_request,
    refuse_nonce_in,
)
from forkpoint.core.hashing import canonical_sha256, sha256_hex
from forkpoint.core.model import JsonObject

EPHEMERAL = {"type": "ephemeral"}
NO_RESPONSE_MESSAGE = {"role": "assistant", "content": [{"type": "text", "text": NO_RESPONSE_TEXT}]}
CONTINUE_BLOCK = {"type": "text", "text": CONTINUE_TEXT}
SYSTEM_FACT_CHARS = 40


def clean_first_request(expected: ExpectedPrefix, body: Any, boundary_prompt: str | None = None) -> Verdict:
    """The first model request: it must end exactly at the boundary tool results (plus the boundary prompt)."""
    return ClaudeGate(expected, boundary_prompt).first(body)


def clean_later_request(expected: ExpectedPrefix, body: Any, boundary_prompt: str | None) -> Verdict:
    """A later request: the same prefix and envelope, followed by the real continuation (kept)."""
    return ClaudeGate(expected, boundary_prompt).later(body)


def _clean(expected: ExpectedPrefix, body: Any, boundary_prompt: str | None, *, first: bool,
           facts: JsonObject) -> JsonObject:
    profile = gate_profile(expected.version, expected.profile)
    if profile is None:
        raise Refusal(f"no verified resume envelope profile {expected.profile!r} for Claude Code {expected.version}")
    nonce = expected.nonce
    body, messages = open_request(body, nonce=nonce, boundary_prompt=boundary_prompt)
    i = nonce_position(messages, lambda message: _is_nonce_message(message, nonce, profile),
                       "the resume nonce is not the sole content of a user message", facts)

    after = messages[i + 1:]
    leading_system = 0
    while leading_system < len(after) and after[leading_system].get("role") == "system":
        leading_system += 1
    if first and leading_system != len(after):
        index = i + 1 + leading_system
        raise Refusal(
            f"message {index} after the resume nonce has role {after[leading_system].get('role')!r}; the first "
            "request may only carry role:\"system\" messages after the nonce"
        )
    stripped_system = after[:leading_system]
    facts["system_after_nonce"] = len(stripped_system)
    facts["system_after_nonce_sha256"] = [sha256_hex(_text_of(m)[:SYSTEM_FACT_CHARS]) for m in stripped_system]
    continuation = after[leading_system:]

    if i < 3:
        raise Refusal(f"the resume nonce (message {i}) has no complete envelope and prefix before it")
    if messages[i - 1] != NO_RESPONSE_MESSAGE:
        raise Refusal(f"message {i - 1} before the resume nonce is not the exact assistant closure "
                       f"{NO_RESPONSE_TEXT!r}")
    k = i - 2
    boundary = messages[k]
    content = boundary.get("content")
    if boundary.get("role") != "user" or not isinstance(content, list) or not content:
        raise Refusal(f"message {k} (the boundary) is not a user message with content blocks")
    blocks = list(content)
    if profile.continue_closure:
        if blocks[-1] != CONTINUE_BLOCK:
            raise Refusal(f"message {k} (the boundary) does not end with the exact {profile.version} closure "
                           f"text block {CONTINUE_TEXT!r}")
        blocks.pop()
    facts["continue_closure_removed"] = profile.continue_closure
    for position, block in enumerate(blocks):
        if not isinstance(block, dict) or block.get("type") != "tool_result":
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise Refusal(f"message {k} (the boundary) block {position} is {kind!r}; only tool_result blocks may "
                           "precede the envelope")
    if not blocks:
        raise Refusal(f"message {k} (the boundary) holds no tool_result block")

    prefix = [*messages[:k], {**boundary, "content": blocks}]
    _compare(expected, prefix)

    prompt_message: JsonObject | None = None
    if boundary_prompt is not None:
        prompt_message = _prompt_message(messages[i], boundary_prompt)
    facts["boundary_prompt"] = prompt_message is not None
    if first:
        tail = [prompt_message] if prompt_message is not None else []
        cleaned_messages = [*prefix, *tail]
        cleaned_messages[-1] = _mark_last_block(cleaned_messages[-1])
    else:
        cleaned_messages = [*prefix, *([prompt_message] if prompt_message else []), *continuation]
        facts["continuation_messages"] = len(continuation)
    cleaned = {**body, "messages": cleaned_messages}
    refuse_nonce_in(prompt_message, nonce)  # messages[i], the nonce's only place, is not in the cleaned copy
    _check_residue(cleaned)
    facts["message_count"] = expected.message_count
    facts["prefix_sha256"] = expected.prefix_sha256
    facts["closure_messages_removed"] = 2
    return cleaned


def _is_nonce_message(message: JsonObject, nonce: str, profile: EnvelopeProfile) -> bool:
    """The nonce alone, or (the profile allows it) after the agent's own reminder blocks: any reminders, or at most
    the one kind the profile names (``nonce_reminder``)."""
    if message.get("role") != "user":
        return False
    content = message.get("content")
    if content == nonce:
        return True
    if not isinstance(content, list) or not content or not isinstance(content[-1], dict):
        return False
    if len(content) > 1 and not (profile.reminders_before_nonce and _reminders(content[:-1], nonce, profile)):
        return False
    block = content[-1]
    if block.get("type") != "text" or block.get("text") != nonce:
        return False
    extra = set(block) - {"type", "text", "cache_control"}
    return not extra and block.get("cache_control", EPHEMERAL) == EPHEMERAL


def _reminders(blocks: list[Any], nonce: str, profile: EnvelopeProfile) -> bool:
    if profile.nonce_reminder is not None and (len(blocks) != 1 or not isinstance(blocks[0], dict) or not str(
            blocks[0].get("text")).startswith(profile.nonce_reminder)):
        return False
    return all(is_reminder(block) and set(block) == {"type", "text"} and nonce not in block["text"]
               for block in blocks)


def _text_of(message: JsonObject) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""


def _prompt_message(nonce_message: JsonObject, prompt: str) -> JsonObject:
    """The nonce message with its text replaced by the boundary prompt (same shape, same position)."""
    content = nonce_message["content"]
    if isinstance(content, str):
        return {**nonce_message, "content": prompt}
    return {**nonce_message, "content": [*content[:-1], {**content[-1], "text": prompt}]}


def _mark_last_block(message: JsonObject) -> JsonObject:
    """Put the cache marker back where the original request had it: the last block of the last message."""
    content = message["content"]
    if isinstance(content, str):
        content = [{"type": "text", "text": content}]
    return {**message, "content": [*content[:-1], {**content[-1], "cache_control": dict(EPHEMERAL)}]}


def _check_residue(cleaned: JsonObject) -> None:
    for index, message in enumerate(cleaned["messages"]):
        content = message.get("content")
        texts = [content] if isinstance(content, str) else [
            b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"
        ] if isinstance(content, list) else []
        for text in texts:
            if text in (NO_RESPONSE_TEXT, CONTINUE_TEXT):
                raise Refusal(f"message {index} of the cleaned request still holds the envelope text {text!r}")


# -- comparison with the manifest ----------------------------------------------------------------------------------


def _compare(expected: ExpectedPrefix, prefix: Sequence[JsonObject]) -> None:
    """Refuse unless the projection of ``prefix`` is exactly the rebuilt session's; name the first difference."""
    indexed = project_indexed(prefix)
    projected = [message for _, message in indexed]
    count = expected.message_count
    for position, message in enumerate(projected[:count]):
        if canonical_sha256(message) == expected.message_sha256[position]:
            continue
        _, roles, blocks = digest_messages([message])  # block digests only to name a difference: a hash each
        where = f"conversation message {position} (request messages[{indexed[position][0]}])"
        detail = _explain(expected, position, roles[0], blocks[0])
        raise Refusal(f"{where} differs from the rebuilt session: {detail}")
    if len(projected) > count:
        where = f"conversation message {count} (request messages[{indexed[count][0]}])"
        raise Refusal(f"{where} is extra: the request has {len(projected)} conversation messages before the "
                       f"envelope, the rebuilt session {count}")
    if len(projected) < count:
        raise Refusal(f"conversation message {len(projected)} ({expected.message_roles[len(projected)]}) is "
                       f"missing: the request has {len(projected)} conversation messages before the envelope, the "
                       f"rebuilt session {count}")
    # Every message equals the rebuilt session's, in number and content: the whole-prefix hash, the tool ids,
    # the observation hashes and the boundary results (all functions of those messages) are equal too.


def _explain(expected: ExpectedPrefix, position: int, role: str, got: Sequence[BlockDigest]) -> str:
    want_role = expected.message_roles[position]
    if role != want_role:
        return f"role is {role!r}, expected {want_role!r}"
    want = expected.message_blocks[position]
    want_results = [b.tool_use_id for b in want if b.type == "tool_result"]
    got_results = [b.tool_use_id for b in got if b.type == "tool_result"]
    if want_results != got_results and sorted(map(str, want_results)) == sorted(map(str, got_results)):
        return f"its tool results are in a different order: expected {want_results}, got {got_results}"
    for index in range(max(len(want), len(got))):
        if index >= len(got):
            return f"block {index} ({_describe(want[index])}) is missing"
        if index >= len(want):
            return f"block {index} ({_describe(got[index])}) is extra"
        w, g = want[index], got[index]
        if w == g:
            continue
        if w.type != g.type:
            return f"block {index} is {_describe(g)}, expected {_describe(w)}"
        if w.tool_use_id != g.tool_use_id:
            return f"block {index} is {_describe(g)}, expected {_describe(w)}"
        if g.type == "tool_result":
            return f"the observation of {g.tool_use_id} (block {index}) differs"
        if g.type == "tool_use":
            return f"tool_use {g.tool_use_id} (block {index}) differs in its name or input"
        return f"block {index} ({g.type}) differs"
    return "its content differs"


def _describe(block: BlockDigest) -> str:
    if block.type == "tool_use":
        return f"tool_use {block.tool_use_id}"
    if block.type == "tool_result":
        return f"tool_result for {block.tool_use_id}"
    return block.type


class ClaudeGate(PrefixGate[ExpectedPrefix]):
    """Anthropic Messages requests from a resumed Claude Code (envelope profiles per verified version)."""

    name = "anthropic-messages"
    model_routes = frozenset({"/v1/messages"})
    #: its sub-agent tool (``Agent``; ``Task`` before it was renamed) and the input holding the sub-agent's prompt
    subagent_tools = MappingProxyType({"Agent": "prompt", "Task": "prompt"})

    def clean(self, body: Any, first: bool, facts: JsonObject) -> JsonObject:
        return _clean(self.expected, body, self.boundary_prompt, first=first, facts=facts)
