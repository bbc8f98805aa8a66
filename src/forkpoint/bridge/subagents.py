"""Sub-agent conversations a continued agent starts live (pure; the bridge feeds it, protocols read the wire).

A continued agent that calls its sub-agent tool (Claude Code's ``Agent``/``Task``) makes the sub-agent's model
requests as a NEW conversation: its own system prompt, the parent's ``prompt`` as its first user text, neither the
rebuilt prefix nor the resume nonce. The gate refuses those. The bridge forwards one only when it descends from an
answer the bridge itself forwarded after the validated first request:

* while a forwarded answer streams to the agent, the protocol's ``AnswerReader`` reads the prompt input of every
  sub-agent tool call in it and grants it as soon as the call's block is complete, right before those bytes go to
  the agent (one grant per call): Claude Code may start a tool from a complete block before the message ends, so
  waiting for the answer's end could refuse a sub-agent the agent rightly started;
* a request that OPENS a conversation (no assistant turn yet) whose first user text is a granted prompt takes
  that grant (each grant opens one conversation);
* a later request must repeat a tracked conversation's last accepted messages exactly (compared by per-message
  digests of the protocol's projection) and may only add messages after them; the same messages again is a retry.

Everything else stays refused. Memory is bounded: prompts and conversations are capped, messages kept as digests.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

#: the most sub-agent tool calls granted, and sub-conversations tracked, in one run (a flood is refused)
MAX_GRANTS = 1024
MAX_CONVERSATIONS = 1024


class AnswerReader(Protocol):
    """Reads one streamed answer's bytes as they pass (bounded) and collects its sub-agent prompts."""

    prompts: list[str]

    def feed(self, chunk: bytes) -> None: ...


@dataclass(frozen=True)
class Opening:
    """A request's conversation: the prompt its first user message carries (None: not a sub-agent's opening
    shape), whether the conversation has an assistant turn yet, and one digest per message."""

    prompt: str | None
    answered: bool
    digests: tuple[bytes, ...]


@dataclass(frozen=True)
class SubagentWire:
    """A protocol's side of it (``ProtocolSpec.subagents``)."""

    #: (sub-agent tool name -> the input field holding its prompt, called with each complete call's prompt) -> a
    #: reader for one answer
    reader: Callable[[Mapping[str, str], Callable[[str], None]], AnswerReader]
    #: a request body -> its Opening; ValueError when the body is not a conversation of this protocol
    opening: Callable[[Any], Opening]


def digest(projected: Any) -> bytes:
    """One message's digest (its canonical JSON: key order never matters)."""
    return hashlib.sha256(orjson.dumps(projected, option=orjson.OPT_SORT_KEYS)).digest()


@dataclass
class Subagents:
    """The run's grants and sub-conversations (thread-safe: readers grant from the bridge's answer relays)."""

    wire: SubagentWire
    tools: Mapping[str, str]
    _granted: dict[str, int] = field(default_factory=dict)
    _grants: int = 0
    #: each tracked conversation: (its prompt, the digests of its last accepted request's messages)
    _conversations: list[tuple[str, tuple[bytes, ...]]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reader(self) -> AnswerReader:
        """A reader for one forwarded answer: it grants each complete sub-agent call it reads."""
        return self.wire.reader(self.tools, self.grant)

    def grant(self, prompt: str) -> None:
        """A sub-agent call the bridge is handing to the agent: it may open one sub-conversation."""
        with self._lock:
            if self._grants < MAX_GRANTS:
                self._grants += 1
                self._granted[prompt] = self._granted.get(prompt, 0) + 1

    def admit(self, body: Any) -> tuple[str | None, dict[str, Any]]:
        """(None, facts) when ``body`` belongs to a sub-conversation (tracked from now on), else (why not, facts)."""
        try:
            opening = self.wire.opening(body)
        except ValueError as error:
            return f"not a sub-agent conversation: {error}", {}
        with self._lock:
            return self._admit(opening)

    def _admit(self, opening: Opening) -> tuple[str | None, dict[str, Any]]:
        if opening.prompt is None:
            return "the conversation does not open with a sub-agent prompt", {}
        prompt, digests = opening.prompt, opening.digests
        # an opening takes a grant while one is left (parallel sub-agents of one prompt send the same opening)
        if not opening.answered and self._granted.get(prompt, 0) > 0 and len(self._conversations) < MAX_CONVERSATIONS:
            self._granted[prompt] -= 1
            self._conversations.append((prompt, digests))
            return None, {"subagent": len(self._conversations) - 1, "subagent_messages": len(digests),
                          "subagent_opened": True}
        # the conversation it extends furthest (parallel sub-agents share their opening: a request extending one
        # must not be counted against another that has not moved yet)
        extends = [(len(accepted), -index) for index, (known, accepted) in enumerate(self._conversations)
                   if known == prompt and digests[:len(accepted)] == accepted]
        if extends:
            length, index = max(extends)
            index = -index  # of equally far ones, the first opened
            self._conversations[index] = (prompt, digests)
            return None, {"subagent": index, "subagent_messages": len(digests),
                          "subagent_added": len(digests) - length}
        if opening.answered:
            return "the sub-agent conversation does not extend one the bridge accepted", {}
        if len(self._conversations) >= MAX_CONVERSATIONS:
            return f"more than {MAX_CONVERSATIONS} sub-agent conversations", {}
        return "no forwarded answer started a sub-agent with this prompt (or its starts were used)", {}
