"""Write Claude Code session files: the active conversation cut right after a boundary batch."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

import orjson

from forkpoint.adapters.claude_code.parse import ClaudeNative, Record
from forkpoint.errors import trajectory
from forkpoint.hashing import file_sha256, sha256_hex
from forkpoint.model import FreshObservation, Plan


def prefix_records(native: ClaudeNative, after_step: int) -> list[Record]:
    """Active-chain lines up to batch N's last line, plus that prefix's parallel siblings, in file order."""
    terminal = native.batch_terminals[after_step - 1]
    keep: dict[str, Record] = {}
    for record in native.chain:
        keep[record.uuid] = record
        if record is terminal:
            break
    else:
        raise trajectory(f"batch {after_step} does not end on the active conversation")
    for lines in native.batch_records[:after_step]:
        for record in lines:
            keep.setdefault(record.uuid, record)
    ordered = sorted(keep.values(), key=lambda record: record.line)
    if ordered[-1] is not terminal:
        raise trajectory(f"the prefix of batch {after_step} does not end at its last tool result")
    return ordered


def read_lines(path: Path, records: list[Record], expected_sha256: str) -> list[bytes]:
    """Read the original bytes of ``records``; refuse if the source changed since it was parsed."""
    if file_sha256(path) != expected_sha256:
        raise trajectory(f"the trajectory {path} changed while forkpoint was reading it")
    lines: list[bytes] = []
    with path.open("rb") as handle:
        for record in records:
            handle.seek(record.offset)
            data = handle.read(record.length)
            lines.append(data)
    return lines


_COPY_CHUNK = 1 << 20


def write_prepared(plan: Plan, destination: Path) -> str:
    """The prefix with historical observations, byte-identical lines; returns the file's SHA-256.

    One sequential pass over the source: the kept byte ranges are streamed to a temp file (renamed over
    ``destination`` only on success) while the whole source is hashed, so a source that changed since it
    was parsed is refused without a separate re-hash, and no copy of the prefix is held in memory.
    """
    parsed = plan.trajectory
    native = parsed.native
    assert isinstance(native, ClaudeNative)
    records = prefix_records(native, plan.after_step)
    path = parsed.source_path
    from forkpoint.results import atomic_writer

    changed = trajectory(f"the trajectory {path} changed while forkpoint was reading it")
    source_digest = hashlib.sha256()
    out_digest = hashlib.sha256()
    with path.open("rb", buffering=0) as source:
        stat = os.fstat(source.fileno())
        if native.source_stat is not None and (stat.st_size, stat.st_mtime_ns) != native.source_stat:
            raise changed
        with atomic_writer(destination) as out:

            def copy(count: int, keep: bool) -> None:
                while count > 0:
                    chunk = source.read(min(count, _COPY_CHUNK))
                    if not chunk:
                        raise changed  # shorter than when it was parsed
                    source_digest.update(chunk)
                    if keep:
                        out_digest.update(chunk)
                        out.write(chunk)
                    count -= len(chunk)

            position = 0
            for record in records:
                copy(record.offset - position, keep=False)
                copy(record.length, keep=True)
                out_digest.update(b"\n")
                out.write(b"\n")
                position = record.offset + record.length
            while chunk := source.read(_COPY_CHUNK):
                source_digest.update(chunk)
            if source_digest.hexdigest() != parsed.source_sha256:
                raise changed
    return out_digest.hexdigest()


def rebuilt_lines(plan: Plan, fresh: Mapping[str, FreshObservation]) -> list[bytes]:
    """The prefix with each selected tool_result's content replaced by its fresh observation.

    Untouched lines keep their original bytes; a result line is re-serialised with its keys in the
    original order. ``toolUseResult`` (Claude's UI-side copy) is replaced by the executor's fresh one,
    or dropped when the executor has none, so no stale copy of an old observation survives.
    """
    parsed = plan.trajectory
    native = parsed.native
    assert isinstance(native, ClaudeNative)
    records = prefix_records(native, plan.after_step)
    lines = read_lines(parsed.source_path, records, parsed.source_sha256)
    selected = {call.call_id for call in plan.calls}
    replaced: set[str] = set()
    out: list[bytes] = []
    for record, line in zip(records, lines, strict=True):
        if record.type != "user" or record.data is None:
            out.append(line)
            continue
        obj = orjson.loads(line)
        content = obj.get("message", {}).get("content")
        ids = [
            block.get("tool_use_id")
            for block in content
            if isinstance(block, dict) and block.get("type") == "tool_result"
        ] if isinstance(content, list) else []
        mine = [tool_id for tool_id in ids if tool_id in selected]
        if not mine:
            out.append(line)
            continue
        natives = []
        for block in content:
            tool_id = block.get("tool_use_id") if isinstance(block, dict) else None
            if tool_id not in selected:
                continue
            observation = fresh.get(tool_id)
            if observation is None:
                raise trajectory(f"no fresh observation for selected call {tool_id}")
            block["content"] = observation.content
            if observation.is_error or "is_error" in block:
                block["is_error"] = observation.is_error
            replaced.add(tool_id)
            natives.append(observation.native)
        tool_use_result = natives[0] if len(natives) == 1 else None
        if isinstance(tool_use_result, dict | str):  # real Claude writes "Error: ..." strings for errors
            obj["toolUseResult"] = tool_use_result
        else:
            obj.pop("toolUseResult", None)
        out.append(orjson.dumps(obj))
    missing = selected - replaced
    if missing:
        raise trajectory(f"the rebuilt session did not replace every selected observation: {sorted(missing)}")
    return out


def write_rebuilt(plan: Plan, fresh: Mapping[str, FreshObservation], destination: Path) -> str:
    from forkpoint.results import write_atomic

    payload = b"".join(line + b"\n" for line in rebuilt_lines(plan, fresh))
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(destination, payload)
    return sha256_hex(payload)
