"""The prepared rollout prefix: original line bytes cut from the parsed source."""

from __future__ import annotations

import hashlib
from pathlib import Path

from forkpoint.adapters.codex.parse import CodexNative, parse_rollout
from forkpoint.adapters.codex.session import prefix_line_indices, write_prepared
from forkpoint.core.model import Mode
from forkpoint.run.plan import select_boundary
from forkpoint.testing.codex_rollouts import simple_rollout


def test_the_prefix_is_the_head_of_the_parsed_rollout_even_if_the_file_changes_after(tmp_path: Path) -> None:
    source = tmp_path / "r.jsonl"
    simple_rollout(3).write(source)
    original = source.read_bytes()
    plan = select_boundary(parse_rollout(source), 2, Mode.PREPARE_ONLY, "p")
    source.write_bytes(original.replace(b"echo", b"ECHO"))  # rewritten after the parse
    native = plan.trajectory.native
    assert isinstance(native, CodexNative)
    last = native.lines[prefix_line_indices(native, 2)[-1]]
    out = tmp_path / "out.jsonl"
    digest = write_prepared(plan, out)
    assert out.read_bytes() == original[: last.offset + last.length + 1]
    assert digest == hashlib.sha256(out.read_bytes()).hexdigest()
    assert plan.trajectory.source_sha256 == hashlib.sha256(original).hexdigest()


def test_crlf_lines_keep_their_bytes_and_blank_lines_are_dropped(tmp_path: Path) -> None:
    source = tmp_path / "r.jsonl"
    simple_rollout(2).write(source)
    lines = source.read_bytes().splitlines()
    source.write_bytes(b"\r\n".join(lines[:2]) + b"\r\n\n" + b"\n".join(lines[2:]) + b"\n")
    plan = select_boundary(parse_rollout(source), 2, Mode.PREPARE_ONLY, "p")
    native = plan.trajectory.native
    assert isinstance(native, CodexNative)
    kept = len(prefix_line_indices(native, 2))
    out = tmp_path / "out.jsonl"
    write_prepared(plan, out)
    assert out.read_bytes() == lines[0] + b"\r\n" + lines[1] + b"\r\n" + b"".join(
        line + b"\n" for line in lines[2 : kept - 1]
    )
