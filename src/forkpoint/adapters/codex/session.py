"""Write Codex rollout files: the rollout cut right after a boundary batch's last output."""

from __future__ import annotations

from pathlib import Path

from forkpoint.adapters.codex.parse import CodexNative
from forkpoint.errors import trajectory
from forkpoint.hashing import file_sha256, sha256_hex
from forkpoint.model import Plan
from forkpoint.results import write_atomic


def prefix_line_indices(native: CodexNative, after_step: int) -> range:
    end = native.batch_end[after_step - 1]
    if end < 0:
        raise trajectory(f"batch {after_step} has no recorded output")
    return range(0, end + 1)


def read_prefix(plan: Plan) -> list[bytes]:
    """The original bytes of every line up to and including batch N's last output."""
    parsed = plan.trajectory
    native = parsed.native
    assert isinstance(native, CodexNative)
    if file_sha256(parsed.source_path) != parsed.source_sha256:
        raise trajectory(f"the trajectory {parsed.source_path} changed while forkpoint was reading it")
    wanted = prefix_line_indices(native, plan.after_step)
    out: list[bytes] = []
    with parsed.source_path.open("rb") as handle:
        for line in native.lines:
            if line.index in wanted:
                handle.seek(line.offset)
                out.append(handle.read(line.length))
    return out


def write_prepared(plan: Plan, destination: Path) -> str:
    payload = b"".join(line + b"\n" for line in read_prefix(plan))
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(destination, payload)
    return sha256_hex(payload)
