"""Copilot CLI's calibration probe: the recording the replay and resume checks read names the candidate in its
``session.start`` (``copilotVersion``), every other event byte for byte as the release wrote it."""

from __future__ import annotations

from pathlib import Path

from forkpoint.adapters.copilot_cli.calibrate import as_candidate
from forkpoint.adapters.copilot_cli.parse import parse_copilot

SESSION = Path(__file__).resolve().parents[2] / "fixtures" / "copilot_cli" / "1.0.102" / "tools" / "session.jsonl"


def test_the_session_start_names_the_candidate_and_the_rest_is_unchanged(tmp_path: Path) -> None:
    data = SESSION.read_bytes()
    release = data.replace(b'"copilotVersion":"1.0.102"', b'"copilotVersion":"1.0.92"', 1)
    assert release != data
    rewritten = tmp_path / "session.jsonl"
    rewritten.write_bytes(as_candidate(release, "1.0.92", "1.0.102"))
    assert parse_copilot(rewritten).version == "1.0.102"
    assert rewritten.read_bytes().partition(b"\n")[2] == release.partition(b"\n")[2]
