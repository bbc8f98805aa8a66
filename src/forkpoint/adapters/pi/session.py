"""Write a Pi v3 session cut after batch N (pure line building + one atomic write).

Measured on 0.83.0 (docs/adapters/pi.md): Pi resumes any v3 file whose entries chain through ``id`` /
``parentId``; the context is the path from the last entry to the root, sent in file order. The rebuilt file is
the ``session`` header, the recorded ``model_change`` / ``thinking_level_change`` entries (session input), then
one ``message`` entry per conversation message up to the last result of batch N, with the results of batches
1..N replaced by the fresh ones (historical ones for the prepared prefix). Everything else of a message
(assistant turns, user prompts, timestamps) is kept as recorded, so the wire request is the recorded one.

A ``compaction`` entry (Pi 1.x) that precedes the cut is written where it was, as recorded (its
``firstKeptEntryId`` names a recorded entry id, which the rebuild keeps): Pi then sends its summary and the messages
it keeps, as it did while recording. The summary was written by the model from the historical observations of
the messages it replaced, so with fresh observations the cut holds only while every one of those replays exactly
(``check_summaries``); otherwise it is refused (divergence) rather than pairing a summary with a world it no
longer describes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

from forkpoint.adapters.pi.parse import PiNative, dumps
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import FreshObservation, JsonObject, Plan
from forkpoint.core.results import write_atomic


def prefix_messages(plan: Plan, fresh: Mapping[str, FreshObservation] | None) -> list[JsonObject]:
    """The conversation up to the last result of batch N; with ``fresh``, every prefix result replaced."""
    native: PiNative = plan.trajectory.native
    end = native.batch_end[plan.after_step - 1]
    messages = list(native.messages[: end + 1])
    if fresh is None:
        return messages
    prefix_ids = {call.call_id for call in plan.calls}
    for index, message in enumerate(messages):
        call_id = message.get("toolCallId")
        if message.get("role") != "toolResult" or call_id not in prefix_ids:
            continue
        observation = fresh[str(call_id)]
        messages[index] = fresh_result(message, observation)
    return messages


def fresh_result(recorded: JsonObject, observation: FreshObservation) -> JsonObject:
    """A toolResult message carrying the fresh content/details/isError, in Pi's own key order."""
    result: JsonObject = {"role": "toolResult", "toolCallId": recorded["toolCallId"],
                          "toolName": recorded.get("toolName"), "content": observation.content}
    details = observation.native.get("details") if isinstance(observation.native, dict) else None
    if details is not None:
        result["details"] = details
    result["isError"] = observation.is_error
    if "durationMs" in recorded:  # Pi 1.x stores how long the tool ran: the fresh run's time
        result["durationMs"] = observation.duration_ms
    if "timestamp" in recorded:
        result["timestamp"] = recorded["timestamp"]
    return result


def session_lines(native: PiNative, session_id: str, cwd: str, messages: list[JsonObject]) -> list[bytes]:
    """The header and entries of a linear v3 session holding ``messages``."""
    header = native.header or {}
    recorded = header.get("timestamp")
    stamp = recorded if isinstance(recorded, str) else _now()
    lines = [dumps({"type": "session", "version": 3, "id": session_id, "timestamp": stamp, "cwd": cwd})]
    parent: str | None = None
    used: set[str] = set()
    for position, setting in enumerate(native.settings):
        entry_id = _entry_id(setting.get("id"), session_id, f"setting:{position}", used)
        lines.append(dumps({**setting, "id": entry_id, "parentId": parent}))
        parent = entry_id
    compactions = [c for c in native.compactions if c.entry is not None and c.position <= len(messages)]
    for compaction in compactions:
        used.add(str(compaction.entry["id"]) if compaction.entry else "")
    for index, message in enumerate(messages):
        for compaction in (c for c in compactions if c.position == index):
            lines.append(dumps({**(compaction.entry or {}), "parentId": parent}))
            parent = str((compaction.entry or {})["id"])
        known = native.entry_ids[index] if index < len(native.entry_ids) else None
        entry_id = _entry_id(known, session_id, f"message:{index}", used)
        when = native.entry_times[index] if index < len(native.entry_times) else None
        lines.append(dumps({"type": "message", "id": entry_id, "parentId": parent,
                            "timestamp": when or _entry_time(message, stamp), "message": message}))
        parent = entry_id
    for compaction in (c for c in compactions if c.position == len(messages)):  # right after the cut
        lines.append(dumps({**(compaction.entry or {}), "parentId": parent}))
        parent = str((compaction.entry or {})["id"])
    return lines


def check_summaries(plan: Plan, fresh: Mapping[str, FreshObservation], messages: list[JsonObject]) -> None:
    """Refuse a cut whose latest compaction summarised an observation that did not replay exactly."""
    from forkpoint.adapters.pi.tools import normalize_volatile

    native: PiNative = plan.trajectory.native
    latest = next((c for c in reversed(native.compactions) if c.entry is not None and c.position <= len(messages)),
                  None)
    if latest is None:
        return
    calls = {call.call_id: call for call in plan.calls}
    for message in messages[: latest.kept]:
        call = calls.get(str(message.get("toolCallId"))) if message.get("role") == "toolResult" else None
        observation = fresh.get(call.call_id) if call is not None else None
        if call is None or observation is None or call.historical is None:
            continue
        if (normalize_volatile(observation.content), observation.is_error) != (
                normalize_volatile(call.historical.content), call.historical.is_error):
            raise ReplayError(ErrorKind.DIVERGENCE, f"the fresh observation of {call.name}({call.call_id}) differs "
                                                    f"from the recorded one, which Pi's compaction at "
                                                    f"{latest.where} summarised: the recorded summary no longer "
                                                    "describes the replayed world, so this boundary cannot be "
                                                    "rebuilt (choose one before the compaction)")


def _entry_id(recorded: object, session_id: str, salt: str, used: set[str]) -> str:
    """The recorded entry id when there is one, else 8 hex characters derived from the session id."""
    candidate = recorded if isinstance(recorded, str) and recorded else hashlib.sha256(
        f"{session_id}:{salt}".encode()).hexdigest()[:8]
    while candidate in used:
        candidate = hashlib.sha256(f"{candidate}:{salt}".encode()).hexdigest()[:8]
    used.add(candidate)
    return candidate


def _entry_time(message: JsonObject, fallback: str) -> str:
    millis = message.get("timestamp")
    if isinstance(millis, int) and not isinstance(millis, bool) and 0 < millis < 10**14:
        return datetime.fromtimestamp(millis / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return fallback


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def session_file_name(native: PiNative, session_id: str) -> str:
    """Pi's own naming: ``<ISO timestamp with : and . as ->_<session id>.jsonl``."""
    header = native.header or {}
    recorded = header.get("timestamp")
    stamp = recorded if isinstance(recorded, str) else "1970-01-01T00:00:00.000Z"
    return f"{stamp.replace(':', '-').replace('.', '-')}_{session_id}.jsonl"


def write_session(plan: Plan, fresh: Mapping[str, FreshObservation] | None, destination: Path) -> str:
    """Write the cut session; returns its SHA-256."""
    native: PiNative = plan.trajectory.native
    session_id = plan.trajectory.session_id or ""
    cwd = plan.trajectory.cwd or ""
    messages = prefix_messages(plan, fresh)
    if fresh is not None:
        check_summaries(plan, fresh, messages)
    data = b"".join(line + b"\n" for line in session_lines(native, session_id, cwd, messages))
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(destination, data)
    return sha256_hex(data)
