"""Write Claude Code session files: the active conversation cut right after a boundary batch."""

from __future__ import annotations

from pathlib import Path

from forkpoint.adapters.claude_code.parse import ClaudeNative, Record
from forkpoint.errors import trajectory
from forkpoint.hashing import file_sha256, sha256_hex
from forkpoint.model import Plan


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


def write_prepared(plan: Plan, destination: Path) -> str:
    """The prefix with historical observations, byte-identical lines; returns the file's SHA-256."""
    parsed = plan.trajectory
    native = parsed.native
    assert isinstance(native, ClaudeNative)
    records = prefix_records(native, plan.after_step)
    lines = read_lines(parsed.source_path, records, parsed.source_sha256)
    payload = b"".join(line + b"\n" for line in lines)
    from forkpoint.results import write_atomic

    write_atomic(destination, payload)
    return sha256_hex(payload)
