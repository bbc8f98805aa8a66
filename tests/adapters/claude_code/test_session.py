"""The prepared prefix: original line bytes cut from the parsed source, one ``\\n`` per line, hashed."""

from __future__ import annotations

import hashlib
from pathlib import Path

from forkpoint.adapters.claude_code.parse import ClaudeNative, parse_session
from forkpoint.adapters.claude_code.session import prefix_records, write_prepared
from forkpoint.core.model import Mode
from forkpoint.core.results import line_pieces
from forkpoint.run.plan import select_boundary
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, simple_session, text, tool_use


def _prepare(session: Path, after: int, out: Path) -> tuple[bytes, str]:
    plan = select_boundary(parse_session(session), after, Mode.PREPARE_ONLY, "p")
    digest = write_prepared(plan, out)
    return out.read_bytes(), digest


def test_a_prefix_at_the_head_of_the_file_is_one_slice(tmp_path: Path) -> None:
    lines = simple_session(3).lines()
    session = tmp_path / "s.jsonl"
    session.write_bytes(b"".join(line + b"\n" for line in lines))
    parsed = parse_session(session)
    native = parsed.native
    assert isinstance(native, ClaudeNative)
    spans = [(record.offset, record.length) for record in prefix_records(native, 2)]
    assert len(line_pieces(native.source, spans)) == 1  # written straight from the parsed bytes
    data, digest = _prepare(session, 2, tmp_path / "out.jsonl")
    assert data == b"".join(line + b"\n" for line in lines[:7])  # task + 2 × (text, tool_use, result)
    assert digest == hashlib.sha256(data).hexdigest()


def test_crlf_lines_and_an_unterminated_last_line_end_with_a_single_newline(tmp_path: Path) -> None:
    lines = simple_session(2).lines()[:-1]  # the file ends at the last result, without a line terminator
    session = tmp_path / "s.jsonl"
    session.write_bytes(b"\r\n".join(lines))
    data, digest = _prepare(session, 2, tmp_path / "out.jsonl")
    assert data == b"".join(line + b"\n" for line in lines)
    assert digest == hashlib.sha256(data).hexdigest()


def test_skipped_lines_split_the_prefix_into_runs(tmp_path: Path) -> None:
    builder = ClaudeSessionBuilder()
    builder.user_prompt("go")
    builder.assistant([text("one"), tool_use("t1", "Bash", {"command": "a"})])
    builder.results({"t1": "A"})
    builder.bookkeeping({"type": "queue-operation", "operation": "enqueue", "content": "x"})
    builder.assistant([text("two"), tool_use("t2", "Bash", {"command": "b"})])
    builder.results({"t2": "B"})
    builder.assistant([text("done")])
    lines = builder.lines()
    session = builder.write(tmp_path / "s.jsonl")
    data, digest = _prepare(session, 2, tmp_path / "out.jsonl")
    kept = [line for line in lines[:-1] if b"queue-operation" not in line]
    assert data == b"".join(line + b"\n" for line in kept)
    assert digest == hashlib.sha256(data).hexdigest()


def test_a_source_rewritten_after_the_parse_cannot_leak_into_the_prefix(tmp_path: Path) -> None:
    lines = simple_session(2).lines()
    session = tmp_path / "s.jsonl"
    session.write_bytes(b"".join(line + b"\n" for line in lines))
    plan = select_boundary(parse_session(session), 1, Mode.PREPARE_ONLY, "p")
    session.write_bytes(b"".join(line.replace(b"echo", b"ECHO") + b"\n" for line in lines))
    out = tmp_path / "out.jsonl"
    write_prepared(plan, out)
    assert out.read_bytes() == b"".join(line + b"\n" for line in lines[:4])
    assert plan.trajectory.source_sha256 == hashlib.sha256(b"".join(line + b"\n" for line in lines)).hexdigest()


def test_a_large_session_hashes_source_and_prefix_exactly(tmp_path: Path) -> None:
    """Above the background-hash threshold (1 MiB) both digests still equal hashlib's of the bytes."""
    builder = ClaudeSessionBuilder()
    builder.user_prompt("big")
    for n in range(12):
        builder.assistant([text(f"step {n}"), tool_use(f"t{n}", "Bash", {"command": f"cat {n}"})])
        builder.results({f"t{n}": f"{n:02d}" * 250_000})
    builder.assistant([text("done")])
    session = builder.write(tmp_path / "s.jsonl")
    source = session.read_bytes()
    assert len(source) > 1 << 20
    parsed = parse_session(session)
    assert parsed.source_sha256 == hashlib.sha256(source).hexdigest()
    data, digest = _prepare(session, 12, tmp_path / "out.jsonl")
    assert data == source[: source.rindex(b"\n", 0, len(source) - 1) + 1]
    assert digest == hashlib.sha256(data).hexdigest()
