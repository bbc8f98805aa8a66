"""Gemini CLI 0.61.0's resume envelope for the one Gemini API gate, and its expected prefix (pure).

Measured on the real binary (docs/adapters/gemini-cli.md, tests/fixtures/gemini_cli/0.61.0/): after
``gemini --session-file <rebuilt> -p NONCE`` the first request's ``contents`` are

* ``contents[0]``: a FRESH ``<session_context>`` part (date, OS, the workspace's directory listing: regenerated on
  every start, so it is fingerprinted, not compared) followed by the parts of the first user prompt;
* the session's messages converted by ``convertSessionToClientHistory`` (``client_history`` mirrors it): each
  ``gemini`` message's text, thoughts and calls as one model content, the call results as a user content, the user
  records as user contents; consecutive contents of one role merged. A call's function response therefore appears
  TWICE (the call's ``result`` and the user record carrying it): that is the binary's own behaviour, expected;
* because the history ends with a user turn, one model content ``[The previous response was interrupted before it
  completed.]`` (the envelope), then the ``-p`` prompt as its own user content: the nonce the gate swaps for the
  boundary prompt (or removes, so the request ends at the last fresh observation).

Call ids (the wire drops the ``<name>__`` prefix the session stores) and ``thoughtSignature`` (not in the session)
differ from the recording and are not compared (``forkpoint.bridge.protocols.gemini.project_part``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from forkpoint.bridge.protocols.gemini import ExpectedGemini, GeminiProfile
from forkpoint.core.model import JsonObject

PROFILE_ID = "gemini-cli/0.61.0/session-file-v1"
INTERRUPTED = "[The previous response was interrupted before it completed.]"
_IGNORED_PREFIXES = ("/", "?", "<session_context>", "<hook_context>")


def is_context(part: Any) -> bool:
    return isinstance(part, dict) and isinstance(part.get("text"), str) and part["text"].strip().startswith(
        "<session_context>")


PROFILE = GeminiProfile(agent="Gemini CLI", context_part=is_context,
                        envelope=({"role": "model", "parts": [{"text": INTERRUPTED}]},),
                        verified=frozenset({PROFILE_ID}))


def _parts(content: Any) -> list[Any]:
    if isinstance(content, list):
        return [{"text": part} if isinstance(part, str) else part for part in content]
    if isinstance(content, str):
        return [{"text": content}]
    return [content]


def _as_text(content: Any) -> str:
    """``partListUnionToString`` for what decides whether a user record is skipped (texts joined; any other part
    makes the record non-empty)."""
    pieces = []
    for part in _parts(content):
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            pieces.append(part["text"])
        elif part is not None:
            pieces.append("[part]")
    return "".join(pieces)


def client_history(messages: Sequence[JsonObject]) -> list[JsonObject]:
    """The contents Gemini CLI 0.61.0 rebuilds from session messages (``convertSessionToClientHistory``), merged
    by role as they are sent."""
    history: list[JsonObject] = []
    for message in messages:
        kind = message.get("type")
        if kind == "user":
            text = _as_text(message.get("content")).strip()
            if not text or text.startswith(_IGNORED_PREFIXES):
                continue
            history.append({"role": "user", "parts": _parts(message.get("content"))})
        elif kind == "gemini":
            content = message.get("content")
            content_parts = _parts(content) if content else []
            calls = [c for c in message.get("toolCalls") or [] if isinstance(c, dict)]
            model_parts: list[Any] = []
            if any(isinstance(p, dict) and (p.get("functionCall") or p.get("thought")) for p in content_parts):
                model_parts.extend(content_parts)
            else:
                for thought in message.get("thoughts") or []:
                    if isinstance(thought, dict):
                        subject, description = thought.get("subject"), thought.get("description")
                        text = f"**{subject}** {description}" if subject else str(description)
                        model_parts.append({"text": text, "thought": True})
                model_parts.extend(content_parts)
                model_parts.extend({"functionCall": {"id": c.get("id"), "name": c.get("name"), "args": c.get("args")}}
                                   for c in calls)
            if not model_parts:
                continue
            history.append({"role": "model", "parts": model_parts})
            responses: list[Any] = []
            for call in calls:
                result = call.get("result")
                if not result:
                    continue
                if isinstance(result, str):
                    responses.append({"functionResponse": {"id": call.get("id"), "name": call.get("name"),
                                                           "response": {"output": result}}})
                elif isinstance(result, list):
                    responses.extend(_parts(result))
                else:
                    responses.append(result)
            if responses:
                history.append({"role": "user", "parts": responses})
    merged: list[JsonObject] = []
    for content in history:
        if merged and merged[-1]["role"] == content["role"]:
            merged[-1] = {"role": content["role"], "parts": [*merged[-1]["parts"], *content["parts"]]}
        else:
            merged.append(content)
    return merged


def expected_prefix(messages: Sequence[JsonObject], model: str, nonce: str | None) -> ExpectedGemini:
    """The contents the first request must carry before the resume envelope."""
    contents = client_history(messages)
    last = contents[-1] if contents else {}
    if last.get("role") != "user" or not any(isinstance(p, dict) and "functionResponse" in p
                                             for p in last.get("parts", [])):
        raise ValueError("a rebuilt Gemini CLI prefix must end with the function responses of its last batch")
    return ExpectedGemini.of(PROFILE_ID, contents, model, nonce=nonce)
