"""OpenHands V0's calibration probe, the parts that need no OpenHands (the real calibration:
tests/e2e/test_calibrate_openhands.py): the recording is read as the candidate by its system event alone."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.adapters import get_adapter
from forkpoint.adapters.openhands.calibrate import ERRORS, as_candidate

FIXTURE = Path(__file__).parents[2] / "fixtures" / "openhands" / "0.62.0" / "parallel" / "trajectory.json"


def test_only_the_system_events_version_is_rewritten_and_the_parser_reads_it(tmp_path: Path) -> None:
    original = json.loads(FIXTURE.read_text())
    rewritten = as_candidate(FIXTURE.read_bytes(), "0.61.0")
    events = json.loads(rewritten)
    assert [e for e in events if e.get("action") != "system"] == [e for e in original if e.get("action") != "system"]
    assert next(e for e in events if e.get("action") == "system")["args"]["openhands_version"] == "0.61.0"
    source = tmp_path / "trajectory.json"
    source.write_bytes(rewritten)
    assert get_adapter("openhands").parse(source).version == "0.61.0"


def test_v0_records_no_error_flag_so_the_probe_expects_none() -> None:
    """V0 observations carry no error flag (a refused replacement is ``ERROR:`` text): every call of the verified
    release's own recording parses as not an error, and so must the probe's."""
    parsed = get_adapter("openhands").parse(FIXTURE)
    assert all(call.historical is not None and not call.historical.is_error
               for batch in parsed.batches for call in batch.calls)
    assert not any(flag for turn in ERRORS for flag in turn)
