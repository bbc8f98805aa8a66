"""Qwen Code's calibration probe: the recording the replay and resume checks read names the candidate, not the
release (every record carries the version)."""

from __future__ import annotations

from pathlib import Path

from forkpoint.adapters.qwen_code.calibrate import as_candidate
from forkpoint.adapters.qwen_code.parse import parse_qwen

SESSION = Path(__file__).resolve().parents[2] / "fixtures" / "qwen_code" / "0.24.4" / "tools" / "session.jsonl"


def test_the_session_is_read_as_the_candidate_with_every_record_rewritten(tmp_path: Path) -> None:
    release = SESSION.read_bytes().replace(b'"version":"0.24.4"', b'"version":"0.24.3"')
    assert b'"version":"0.24.3"' in release
    rewritten = tmp_path / "session.jsonl"
    rewritten.write_bytes(as_candidate(release, "0.24.3", "0.24.4"))
    parsed = parse_qwen(rewritten)
    assert parsed.version == "0.24.4" and b"0.24.3" not in rewritten.read_bytes()
    assert [len(b.calls) for b in parsed.batches] == [len(b.calls) for b in parse_qwen(SESSION).batches]
