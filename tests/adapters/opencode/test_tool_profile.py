"""The 1.2 tool profile: which binary re-runs a recording's calls, and what the result says about it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.adapters import get_adapter
from forkpoint.adapters.opencode.tool_profile import (
    LINE_1_2,
    LINE_1_3,
    _plain,
    installed_release,
    line_binary,
    line_for,
)

FIXTURE = Path(__file__).parents[2] / "fixtures" / "opencode" / "1.2.6" / "old_line" / "export.json"


@pytest.mark.parametrize(("recorded", "line"), [
    ("1.2.5", LINE_1_2), ("1.2.0", LINE_1_2), ("1.2.6", LINE_1_2), ("1.2.5-beta.1", LINE_1_2),
    ("1.17.11", None), ("1.3.0", LINE_1_3), ("1.3.2", LINE_1_3), ("1.14.41", None), ("1.4.0", None),
    ("1.1.9", None), (None, None), ("not a version", None),
])
def test_the_line_is_chosen_by_the_recorded_release_number(recorded: str | None, line: object) -> None:
    assert line_for(recorded) is line


@pytest.mark.parametrize("hostile", ["1.2.5/../../etc", "1.2.5\n", "v1.2.5", "1.2.5" + "9" * 10_000, "01.2.5"])
def test_only_a_plain_release_number_ever_names_a_runtime_folder(hostile: str) -> None:
    """A recorded label is looked up in the runtime cache only rebuilt from its numbers and equal to them."""
    assert _plain(hostile) is None
    assert _plain("1.2.5") == "1.2.5"


def _facts(path: Path) -> tuple[str, tuple[str, ...]]:
    adapter = get_adapter("opencode")
    facts = adapter.version_facts(adapter.parse(path))
    return facts.status, facts.reasons


def test_without_a_1_2_binary_the_result_says_whose_tools_ran(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORKPOINT_RUNTIMES", str(tmp_path / "no-runtimes"))
    assert installed_release(LINE_1_2, "1.2.5") is None and line_binary(LINE_1_2, "1.2.5") is None
    status, notes = _facts(FIXTURE)
    assert status == "unverified"
    assert "its tools re-run with 1.17.11's semantics" in notes[0]
    assert "needs an installed OpenCode 1.2.6" in notes[-1] and "re-run with 1.17.11's binary instead" in notes[-1]


def test_with_the_measured_binary_a_1_2_5_recording_names_the_1_2_profile(tmp_path: Path) -> None:
    if runtimes.find("opencode", "1.2.6") is None:
        pytest.skip("opencode 1.2.6 is not installed (forkpoint agents calibrate opencode@1.2.6)")
    older = tmp_path / "export.json"
    data = json.loads(FIXTURE.read_text())
    data["info"]["version"] = "1.2.5"
    older.write_text(json.dumps(data))
    assert installed_release(LINE_1_2, "1.2.5") == "1.2.6"  # 1.2.5 itself is not installed: the measured one
    status, notes = _facts(older)
    assert status == "unverified"
    assert "its tools re-run with the opencode 1.2 (measured on 1.2.6) tool profile" in notes[0]
    assert "OpenCode 1.2.6's own binary re-runs the tools" in notes[-1]
    entrypoint = line_binary(LINE_1_2, "1.2.5")
    assert entrypoint is not None and "/opencode/1.2.6/" in str(entrypoint)


def test_a_calibrated_1_2_release_keeps_its_status_and_names_the_profile(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """``agents calibrate opencode@1.2.6`` maps it to 1.17.11 and names the 1.2 profile: not degraded, tools 1.2's."""
    store = tmp_path / "calibrations"
    (store / "opencode").mkdir(parents=True)
    (store / "opencode" / "1.2.6.json").write_text(json.dumps({
        "schema": "forkpoint.calibration/v1", "status": "calibrated", "agent": "opencode", "version": "1.2.6",
        "format_family": "opencode/session-export-json", "maps_to": "1.17.11",
        "profile": "opencode/1.17.11/session-export-sqlite-v1", "tool_profile": LINE_1_2.label,
        "checked": [], "calibrated_at": "2026-12-05T00:00:00Z"}))
    monkeypatch.setenv("FORKPOINT_CALIBRATIONS", str(store))
    monkeypatch.setenv("FORKPOINT_RUNTIMES", str(tmp_path / "no-runtimes"))
    status, notes = _facts(FIXTURE)
    assert status == "calibrated" and len(notes) == 1 and LINE_1_2.label in notes[0]
    from forkpoint.adapters import agent_spec
    from forkpoint.adapters.calibration import listed

    assert listed(agent_spec("opencode")) == [("1.2.6", "calibrated",
                                               f"as 1.17.11, tools as {LINE_1_2.label}")]
