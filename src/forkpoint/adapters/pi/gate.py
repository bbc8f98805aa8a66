"""Pi's Chat Completions profile for the one chat gate (0.83.0 and 1.6.0 alike), and its expected prefix (pure).

Measured on the real package (docs/adapters/pi.md, tests/fixtures/pi/): with the recorded provider/model
configured, the SDK sends ``messages`` = the system prompt, then the session's context converted by Pi's
``openai-completions`` provider, and nothing else:

* ``session.agent.continue()``: no envelope at all. The first request ends with the ``tool`` messages of batch N.
* ``session.prompt(NONCE)``: exactly one appended ``{"role":"user","content":[{"type":"text","text":NONCE}]}``,
  which the gate replaces by the boundary prompt (same shape), so the prompt text never enters Pi's files.

The expected prefix is computed from the rebuilt session's messages the way Pi converts them (``pi_projection``,
mirroring ``convertMessages`` for a same-model history: assistant text joined, ``reasoning_content`` from the
thinking blocks, tool calls with parsed arguments, tool results as their joined text), and compared with the
request's messages (``wire_message``) by the chat gate: count, per-message hashes, prefix hash (equal messages
mean equal call ids, observations and boundary ids). The system prompt is not in the session, so it is not
compared (its hash is a fact, and it must not change between requests).

Pi 1.x (measured on 1.6.0) stores its prompt sections and tool loadout as a ``system`` message, the first message
of the session: it sends it as the leading system message (not compared, as above), so the projection skips it.
A later ``system`` message (a mid-conversation prompt update) would be sent in the conversation, where the gate
refuses it (``wire_message``): forkpoint has not measured that shape.

A rebuilt session holding a ``compaction`` entry is projected the way Pi builds its context from it
(``context_messages``, after 1.6.0's buildContextEntries): the summary as one user message
(``COMPACTION_SUMMARY_PREFIX`` + summary + suffix), the messages it keeps, then everything after it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from forkpoint.adapters.kit.chat_message import wire_tool_calls
from forkpoint.bridge.gate import Refusal
from forkpoint.bridge.protocols.openai_chat import ChatProfile, ExpectedChat
from forkpoint.core.model import JsonObject

PROFILE_ID = "pi/0.83.0/openai-completions-sdk-v1"
#: the envelope profile of each verified version (the same projection, measured on each)
PROFILE_IDS = {"0.83.0": PROFILE_ID, "1.6.0": "pi/1.6.0/openai-completions-sdk-v1"}
_REASONING_KEYS = ("reasoning_content", "reasoning", "reasoning_text")
_SKIPPED_STOPS = frozenset({"error", "aborted"})
#: how Pi 1.6.0 sends a compaction summary (dist/core/messages.js convertToLlm)
COMPACTION_SUMMARY_PREFIX = ("The conversation history before this point was compacted into the following "
                             "summary:\n\n<summary>\n")
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"


def context_messages(entries: Sequence[JsonObject]) -> list[JsonObject]:
    """The messages of a linear session Pi builds its context from: with a compaction, the latest one's summary
    (a ``compactionSummary`` message), the messages from its ``firstKeptEntryId`` on (system messages skipped)
    and every message after it; without one, every message."""
    latest = max((i for i, e in enumerate(entries) if e.get("type") == "compaction"), default=None)
    if latest is None:
        return [e["message"] for e in entries if e.get("type") == "message"]
    compaction = entries[latest]
    out: list[JsonObject] = [{"role": "compactionSummary", "summary": compaction.get("summary")}]
    kept = False
    for entry in entries[:latest]:
        kept = kept or entry.get("id") == compaction.get("firstKeptEntryId")
        if kept and entry.get("type") == "message" and entry["message"].get("role") != "system":
            out.append(entry["message"])
    return out + [e["message"] for e in entries[latest + 1:] if e.get("type") == "message"]


# -- projections -------------------------------------------------------------------------------------------------


def _texts(content: Any) -> list[JsonObject]:
    return [b for b in content if isinstance(b, dict) and b.get("type") == "text"] if isinstance(content, list) else []


def pi_projection(messages: Sequence[JsonObject]) -> list[JsonObject]:
    """What Pi's openai-completions provider sends for these session messages (same model, default compat)."""
    out: list[JsonObject] = []
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "compactionSummary":
            text = f"{COMPACTION_SUMMARY_PREFIX}{message.get('summary')}{COMPACTION_SUMMARY_SUFFIX}"
            out.append({"role": "user", "content": [{"type": "text", "text": text}]})
        elif role == "user":
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


def wire_message(message: Any, index: int) -> JsonObject:
    """A request's conversation message (at ``messages[index]``) in the same shape as ``pi_projection``."""
    role = message.get("role") if isinstance(message, dict) else None
    if not isinstance(message, dict) or role not in ("user", "assistant", "tool"):
        raise Refusal(f"messages[{index}] has role {role!r}, which a Pi session never produces there")
    if role == "user":
        return {"role": "user", "content": message.get("content")}
    if role == "tool":
        return {"role": "tool", "tool_call_id": message.get("tool_call_id"), "content": message.get("content")}
    reasoning = next((message[k] for k in _REASONING_KEYS if isinstance(message.get(k), str)), None)
    calls = wire_tool_calls(message, index)
    content = message.get("content")
    return {"role": "assistant", "content": content if content else None, "reasoning": reasoning,
            "tool_calls": calls}


def nonce_message(text: str) -> JsonObject:
    """What ``session.prompt(NONCE)`` appends."""
    return {"role": "user", "content": [{"type": "text", "text": text}]}


PROFILE = ChatProfile(agent="Pi", project=wire_message, system="optional", system_roles=("system", "developer"),
                      nonce_message=nonce_message, verified=frozenset(PROFILE_IDS.values()))


def expected_prefix(messages: Sequence[JsonObject], nonce: str | None, model: str | None = None,
                    tools: Sequence[str] | None = None, version: str = "0.83.0") -> ExpectedChat:
    """The conversation the first request must carry (``nonce``: the continuation uses ``prompt(NONCE)``)."""
    projected = pi_projection(messages)
    if not projected or projected[-1]["role"] != "tool":
        raise ValueError("a rebuilt Pi prefix must end with the tool results of its last batch")
    profile = PROFILE_IDS.get(version)
    if profile is None:
        raise ValueError(f"Pi {version} has no verified resume envelope profile")
    return ExpectedChat.of(profile, projected, nonce=nonce, model=model, tools=tools)
