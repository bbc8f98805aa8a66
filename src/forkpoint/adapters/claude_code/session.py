"""Write Claude Code session files: the active conversation cut right after a boundary batch."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import orjson

from forkpoint.adapters.claude_code.parse import ClaudeNative, Record
from forkpoint.core.errors import trajectory
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import FreshObservation, Plan


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


def line_bytes(native: ClaudeNative, records: list[Record]) -> list[bytes]:
    """The original bytes of ``records`` (without their line terminators), as they were parsed."""
    return [native.source[record.offset:record.offset + record.length] for record in records]


def write_prepared(plan: Plan[ClaudeNative], destination: Path) -> str:
    """The prefix with historical observations, byte-identical lines; returns the file's SHA-256."""
    from forkpoint.core.results import write_source_lines

    native = plan.trajectory.native
    spans = [(record.offset, record.length) for record in prefix_records(native, plan.after_step)]
    return write_source_lines(destination, native.source, spans)


def rebuilt_lines(plan: Plan[ClaudeNative], fresh: Mapping[str, FreshObservation]) -> list[bytes]:
    """The prefix with each selected tool_result's content replaced by its fresh observation.

    Untouched lines keep their original bytes; a result line is re-serialised with its keys in the
    original order. ``toolUseResult`` (Claude's UI-side copy) is replaced by the executor's fresh one,
    or dropped when the executor has none, so no stale copy of an old observation survives.
    """
    parsed = plan.trajectory
    native = parsed.native
    records = prefix_records(native, plan.after_step)
    lines = line_bytes(native, records)
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
        elif not all(fresh[tool_id].reused for tool_id in mine):
            obj.pop("toolUseResult", None)  # (an answer reused by design keeps its recorded one: it IS the answer)
        out.append(orjson.dumps(obj))
    missing = selected - replaced
    if missing:
        raise trajectory(f"the rebuilt session did not replace every selected observation: {sorted(missing)}")
    return out


def write_rebuilt(plan: Plan[ClaudeNative], fresh: Mapping[str, FreshObservation], destination: Path) -> str:
    from forkpoint.core.results import write_atomic

    payload = b"".join(line + b"\n" for line in rebuilt_lines(plan, fresh))
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(destination, payload)
    return sha256_hex(payload)


def subagent_files(plan: Plan[ClaudeNative], fresh: Mapping[str, FreshObservation] | None) -> list[tuple[str, bytes]]:
    """(path relative to the session's folder, bytes) of the transcripts of the sub-agents the prefix re-ran: where
    the verified binaries keep them (``<session-id>/subagents/agent-<id>.jsonl`` and its ``.meta.json``), their
    results replaced by the fresh observations (``fresh`` None: the recorded bytes, as prepare-only writes)."""
    from forkpoint.adapters.claude_code.subagents import transcript_paths

    native = plan.trajectory.native
    session_id = plan.trajectory.session_id or plan.trajectory.source_path.stem
    out: list[tuple[str, bytes]] = []
    for call in plan.replayed_calls:
        transcript = native.subagents.get(call.call_id)
        if transcript is None or plan.policy_of(call)[1] != "subagent_answer_reused":
            continue
        relative = transcript_paths(session_id, transcript.agent_id)[0]
        lines = [transcript.source[r.offset:r.offset + r.length] for r in transcript.records]
        if fresh is not None:
            lines = [_with_fresh(line, fresh) if record.type == "user" and record.data is not None else line
                     for record, line in zip(transcript.records, lines, strict=True)]
        out.append((relative, b"".join(line + b"\n" for line in lines)))
        if transcript.meta is not None:
            out.append((relative.removesuffix(".jsonl") + ".meta.json", transcript.meta))
    return out


def _with_fresh(line: bytes, fresh: Mapping[str, FreshObservation]) -> bytes:
    """A sub-agent's result line with its results' fresh contents (``toolUseResult`` as ``rebuilt_lines`` does)."""
    obj = orjson.loads(line)
    content = obj.get("message", {}).get("content")
    changed = []
    for block in content if isinstance(content, list) else []:
        tool_id = block.get("tool_use_id") if isinstance(block, dict) else None
        observation = fresh.get(tool_id) if isinstance(tool_id, str) else None
        if observation is None or block.get("type") != "tool_result":
            continue
        block["content"] = observation.content
        if observation.is_error or "is_error" in block:
            block["is_error"] = observation.is_error
        changed.append(observation)
    if not changed:
        return line
    # Claude writes no toolUseResult for a sub-agent's successful result (measured): only a recorded one is replaced
    native = changed[0].native if len(changed) == 1 else None
    if "toolUseResult" in obj and isinstance(native, dict | str):
        obj["toolUseResult"] = native
    elif not all(observation.reused or observation.stale_reused for observation in changed):
        obj.pop("toolUseResult", None)
    return orjson.dumps(obj)
