"""Clean what `claude --resume` appended to the rebuilt session: remove the resume envelope (pure).

Measured on 2.1.220 / 2.1.332 (docs/adapters/claude-code.md): the lines of the prefix are never modified;
after them the binary appends bookkeeping (queue-operation enqueue/dequeue carrying the prompt, last-prompt,
api-request*, mode, cost-state...), then — chained off the last tool result — 2.1.220's ``isMeta`` user
line "Continue from where you left off.", the synthetic assistant "No response requested.", and the user
line holding the resume prompt (forkpoint's nonce). Then come the real continuation turns.

Without a boundary prompt the three envelope lines are removed and their children re-attached to the
boundary observation; with one, the nonce line stays as the single user message after O′N and the nonce
is replaced by the prompt text. Nothing of the nonce may remain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from forkpoint.adapters.kit.jsondoc import loads_record
from forkpoint.core.errors import ErrorKind, ReplayError

CONTINUE_TEXT = "Continue from where you left off."
NO_RESPONSE_TEXT = "No response requested."


def _error(message: str) -> ReplayError:
    return ReplayError(ErrorKind.CONTINUATION, message)


@dataclass(frozen=True)
class CleanedSession:
    lines: list[bytes]
    removed_envelope_lines: int
    continued_turns: int


def _sole_text(record: dict[str, Any]) -> str | None:
    content = record.get("message", {}).get("content") if isinstance(record.get("message"), dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict):
        block = content[0]
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            return str(block["text"])
    return None


def clean_continued(
    lines: list[bytes],
    prefix_lines: list[bytes],
    nonce: str,
    boundary_prompt: str | None = None,
) -> CleanedSession:
    """Return the continued session without the envelope; refuse anything that does not fit the profile."""
    if lines[: len(prefix_lines)] != prefix_lines:
        raise _error("the agent rewrote lines of the rebuilt prefix; the continued session cannot be trusted")
    boundary_uuid = orjson.loads(prefix_lines[-1])["uuid"]
    tail = [loads_record(line) for line in lines[len(prefix_lines):]]
    nonce_bytes = nonce.encode()

    removed: dict[str, str | None] = {}  # uuid -> its replacement parent
    kept: list[dict[str, Any]] = []
    nonce_lines = 0
    dropped_enqueue = False
    for record in tail:
        kind = record.get("type")
        text = _sole_text(record)
        parent = record.get("parentUuid")
        if kind in ("queue-operation", "last-prompt") and nonce_bytes in orjson.dumps(record):
            dropped_enqueue = dropped_enqueue or record.get("operation") == "enqueue"
            continue  # bookkeeping copies of the resume prompt
        if kind == "api-request-blob" and not boundary_prompt and nonce_bytes in orjson.dumps(record):
            continue  # a request-cache copy of the resume message (2.1.332 resuming a 2.1.220 session stores one)
        if kind == "queue-operation" and record.get("operation") == "dequeue" and dropped_enqueue:
            dropped_enqueue = False
            continue  # the dequeue of the resume prompt
        if kind == "user" and record.get("isMeta") is True and text == CONTINUE_TEXT:
            removed[record["uuid"]] = parent
            continue
        if kind == "assistant" and text == NO_RESPONSE_TEXT:
            removed[record["uuid"]] = parent
            continue
        if kind == "user" and text == nonce:
            nonce_lines += 1
            if boundary_prompt:
                record["message"]["content"] = boundary_prompt
                record["parentUuid"] = _resolve(parent, removed)
                kept.append(record)
            else:
                removed[record["uuid"]] = parent
            continue
        kept.append(record)
    if nonce_lines != 1:
        raise _error(f"expected exactly one resume prompt line in the continued session, found {nonce_lines}")
    for record in kept:
        if "parentUuid" in record:
            record["parentUuid"] = _resolve(record.get("parentUuid"), removed)
    out: list[bytes] = list(prefix_lines)
    for record in kept:
        data = orjson.dumps(record)
        if nonce_bytes in data:
            if not boundary_prompt:
                raise _error(f"the resume nonce remains in a continued {record.get('type')} line")
            data = orjson.dumps(_replace_everywhere(record, nonce, boundary_prompt))
        out.append(data)
    first_assistant = next((r for r in kept if r.get("type") == "assistant" and not r.get("isSidechain")), None)
    if first_assistant is not None and boundary_prompt is None and first_assistant.get("parentUuid") != boundary_uuid:
        # Attachments may sit between; walk up to check the turn hangs off the boundary observation.
        by_uuid = {r.get("uuid"): r for r in kept}
        current = first_assistant.get("parentUuid")
        while current in by_uuid and (by_uuid[current].get("type") == "attachment"
                                      or _is_model_notice(by_uuid[current])):
            current = by_uuid[current].get("parentUuid")
        if current != boundary_uuid:
            raise _error("the first continued assistant turn does not hang off the boundary observation")
    turns = {
        r["message"]["id"]
        for r in kept
        if r.get("type") == "assistant" and isinstance(r.get("message"), dict) and r["message"].get("id")
        and r["message"].get("model") != "<synthetic>"
    }
    return CleanedSession(out, len(removed), len(turns))


#: 2.1.220's form of the notice (measured: a warning-level informational record, no ``modelRestriction``)
_RETIRED_NOTICE = re.compile(r"Session model [\w.:@/-]{1,200} could not be restored \(retired\)"
                             r" \u2014 using the default model instead\.")


def _is_model_notice(record: dict[str, Any]) -> bool:
    """The warning a newer binary writes when it resumes a session whose model it retired (2.1.332 resuming a
    2.0.x session: ``Session model claude-sonnet-4-5-20250929 could not be restored (retired)``): its own
    record, kept, between the boundary observation and the first continued turn. 2.1.332 marks it with
    ``modelRestriction``; 2.1.220 writes only the warning text."""
    if record.get("type") != "system" or record.get("subtype") != "informational":
        return False
    restriction = record.get("modelRestriction")
    if isinstance(restriction, dict):
        return restriction.get("at") == "resume"
    content = record.get("content")
    return record.get("level") == "warning" and isinstance(content, str) and bool(_RETIRED_NOTICE.fullmatch(content))


def _resolve(parent: Any, removed: dict[str, str | None]) -> Any:
    seen: set[str] = set()
    while isinstance(parent, str) and parent in removed:
        if parent in seen:
            raise _error("cycle in the resume envelope's parent chain")
        seen.add(parent)
        parent = removed[parent]
    return parent


def _replace_everywhere(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, list):
        return [_replace_everywhere(item, old, new) for item in value]
    if isinstance(value, dict):
        return {_replace_everywhere(k, old, new): _replace_everywhere(v, old, new) for k, v in value.items()}
    return value
