"""The calibration store: only a consistent, regular, bounded profile makes a recording ``calibrated``, and a
hostile recorded version never becomes a store path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from forkpoint.adapters import agent_spec, calibration, get_adapter

FIXTURE = Path(__file__).parents[1] / "fixtures" / "claude_code" / "2.1.332" / "single_bash" / "session.jsonl"


def _recording(tmp_path: Path, version: str) -> Path:
    path = tmp_path / "session.jsonl"
    path.write_text(FIXTURE.read_text().replace('"version":"2.1.332"', f'"version":"{version}"'))
    return path


def _profile(store: Path, **fields: object) -> Path:
    path = store / "claude-code" / "2.1.331.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": calibration.SCHEMA, "status": "calibrated", "agent": "claude-code",
                                "version": "2.1.331", "format_family": "claude-code/session-jsonl",
                                "maps_to": "2.1.332", "checked": [], **fields}))
    return path


def test_a_consistent_profile_makes_the_version_calibrated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORKPOINT_CALIBRATIONS", str(tmp_path / "store"))
    adapter = get_adapter("claude-code")
    parsed = adapter.parse(_recording(tmp_path, "2.1.331"))
    assert adapter.version_facts(parsed).status == "unverified"
    _profile(tmp_path / "store")
    facts = adapter.version_facts(parsed)
    assert (facts.status, facts.tool_version, facts.reasons) == ("calibrated", "2.1.332", ())


@pytest.mark.parametrize("fields", [{"maps_to": "9.9.9"}, {"agent": "codex"}, {"version": "2.1.330"},
                                    {"format_family": "codex/rollout-jsonl"}, {"status": "failed"},
                                    {"schema": "other"}, {"padding": "x" * (300 * 1024)}])
def test_an_inconsistent_profile_is_ignored(fields: dict[str, object], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORKPOINT_CALIBRATIONS", str(tmp_path / "store"))
    _profile(tmp_path / "store", **fields)
    adapter = get_adapter("claude-code")
    assert adapter.version_facts(adapter.parse(_recording(tmp_path, "2.1.331"))).status == "unverified"


def test_a_profile_behind_a_link_or_a_fifo_is_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORKPOINT_CALIBRATIONS", str(tmp_path / "store"))
    real = _profile(tmp_path / "elsewhere")
    link = tmp_path / "store" / "claude-code" / "2.1.331.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(real)
    spec = agent_spec("claude-code")
    assert calibration.load(spec, "2.1.331") is None
    link.unlink()
    os.mkfifo(link)  # a blocking open would hang: it is opened non-blocking and refused as not a regular file
    assert calibration.load(spec, "2.1.331") is None and calibration.listed(spec) == []


def test_a_hostile_recorded_version_never_becomes_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recorded version is input: one naming a planted profile outside the store is not looked up."""
    monkeypatch.setenv("FORKPOINT_CALIBRATIONS", str(tmp_path / "store"))
    hostile = "2.1.331/../../x"
    planted = _profile(tmp_path / "store", version=hostile).rename(tmp_path / "store" / "x.json")
    (tmp_path / "store" / "claude-code" / "2.1.331").mkdir()  # store/claude-code/2.1.331/../../x.json = planted
    assert json.loads(planted.read_text())["version"] == hostile
    adapter = get_adapter("claude-code")
    parsed = adapter.parse(_recording(tmp_path, hostile))
    assert adapter.version_facts(parsed).status == "unverified"
