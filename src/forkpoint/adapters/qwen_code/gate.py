"""Qwen Code 0.24.4's Chat Completions profile for the one chat gate, and its expected prefix (pure).

Measured on the real binary (docs/adapters/qwen-code.md, tests/fixtures/qwen_code/0.24.4/tools/resume-after-3.json):
after ``qwen --resume <id> -p NONCE`` the first request's ``messages`` are

* one system message (fingerprinted, not compared: it is not in the session; it must not change between requests);
* the session's ``user`` / ``assistant`` / ``tool_result`` records converted to Chat: a user record's text parts
  as ``[{type: text, text}]``, the FIRST user message preceded by the CLI's regenerated ``<system-reminder>`` parts
  (skills list, environment context with a fresh directory listing, the deferred-tool list); an assistant record
  as ``{content: text | null, tool_calls}``, its thought parts as ``reasoning_content`` (and the same text as
  ``reasoning``; measured with one thought part per turn: more are assumed joined without a separator, and a
  different join is refused, not accepted); each tool_result as ``{role: tool, tool_call_id, content: [text]}`` (the
  response's ``output``, or its ``error`` text);
* the ``-p`` prompt as a user message ``[<system-reminder> the current date </system-reminder>, NONCE]``: the
  nonce the gate removes (or replaces by the boundary prompt), reminders included.

``<system-reminder>`` text parts are the CLI's own regenerated context: they are not compared (``wire_message``
drops them from user messages on both sides).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from forkpoint.adapters.kit.chat_message import wire_tool_calls
from forkpoint.adapters.qwen_code.parse import parts, response_of
from forkpoint.bridge.gate import Refusal
from forkpoint.bridge.protocols.openai_chat import ChatProfile, ExpectedChat
from forkpoint.core.model import JsonObject

PROFILE_ID = "qwen-code/0.24.4/resume-v1"
REMINDER = "<system-reminder>"


def _reminder(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "text" and str(part.get("text", "")).startswith(REMINDER)


def observation_text(response: Any) -> str:
    """The text a ``functionResponse.response`` becomes in a tool message (its ``output``, else its ``error``)."""
    if isinstance(response, dict):
        for key in ("output", "error"):
            if isinstance(response.get(key), str):
                return str(response[key])
    return orjson.dumps(response).decode()


def qwen_projection(records: Sequence[JsonObject]) -> list[JsonObject]:
    """The Chat messages (in ``wire_message``'s form) Qwen Code sends for these session records."""
    out: list[JsonObject] = []
    for record in records:
        kind = record.get("type")
        items = parts(record)
        if kind == "user":
            out.append({"role": "user", "content": [str(p["text"]) for p in items
                                                    if isinstance(p, dict) and isinstance(p.get("text"), str)]})
        elif kind == "assistant":
            text = "".join(str(p["text"]) for p in items if isinstance(p, dict) and isinstance(p.get("text"), str)
                           and not p.get("thought"))
            calls = [{"id": p["functionCall"].get("id"), "name": p["functionCall"].get("name"),
                      "arguments": p["functionCall"].get("args")}
                     for p in items if isinstance(p, dict) and isinstance(p.get("functionCall"), dict)]
            thoughts = "".join(str(p["text"]) for p in items if isinstance(p, dict) and p.get("thought")
                               and isinstance(p.get("text"), str))
            out.append({"role": "assistant", "content": text or None, "reasoning": thoughts or None,
                        "tool_calls": calls})
        elif kind == "tool_result":
            response = response_of(record) or {}
            out.append({"role": "tool", "tool_call_id": response.get("id"),
                        "content": [observation_text(response.get("response"))]})
    return out


def wire_message(message: Any, index: int) -> JsonObject:
    """A request's conversation message (at ``messages[index]``) in ``qwen_projection``'s form."""
    role = message.get("role") if isinstance(message, dict) else None
    if not isinstance(message, dict) or role not in ("user", "assistant", "tool"):
        raise Refusal(f"messages[{index}] has role {role!r}, which a Qwen Code session never produces there")
    content = message.get("content")
    if role in ("user", "tool"):
        blocks = [content] if isinstance(content, str) else content if isinstance(content, list) else []
        texts = [b if isinstance(b, str) else b.get("text") if isinstance(b, dict) and b.get("type") == "text"
                 else b for b in blocks if not _reminder(b)]
        if role == "user":
            return {"role": "user", "content": texts}
        return {"role": "tool", "tool_call_id": message.get("tool_call_id"), "content": texts}
    calls = wire_tool_calls(message, index)
    reasoning = message.get("reasoning_content")
    if message.get("reasoning", reasoning) != reasoning:
        raise Refusal(f"messages[{index}] carries two different reasonings (reasoning, reasoning_content)")
    return {"role": "assistant", "content": content if content else None, "reasoning": reasoning or None,
            "tool_calls": calls}


def nonce_message(text: str) -> JsonObject:
    """The ``-p`` prompt's own text part, as the CLI sends it after its reminders."""
    return {"role": "user", "content": [{"type": "text", "text": text}]}


def nonce_envelope(message: Any, nonce: str) -> Callable[[str], JsonObject] | None:
    """When ``message`` is the prompt message (the nonce text part last, only the ``<system-reminder>`` parts the CLI
    regenerates before it): the same message, reminders kept, around another text."""
    if not isinstance(message, dict) or message.get("role") != "user" or set(message) != {"role", "content"}:
        return None
    content = message.get("content")
    if not isinstance(content, list) or not content or content[-1] != nonce_message(nonce)["content"][0]:
        return None
    reminders = content[:-1]
    if not all(_reminder(part) for part in reminders):
        return None
    return lambda text: {"role": "user", "content": [*reminders, *nonce_message(text)["content"]]}


PROFILE = ChatProfile(agent="Qwen Code", project=wire_message, system="optional", nonce_message=nonce_message,
                      nonce_envelope=nonce_envelope, verified=frozenset({PROFILE_ID}))


def expected_prefix(records: Sequence[JsonObject], nonce: str | None, model: str | None = None) -> ExpectedChat:
    """The conversation the first request must carry before the nonce message."""
    projected = qwen_projection(records)
    if not projected or projected[-1]["role"] != "tool":
        raise ValueError("a rebuilt Qwen Code prefix must end with the tool results of its last batch")
    return ExpectedChat.of(PROFILE_ID, projected, nonce=nonce, model=model)
