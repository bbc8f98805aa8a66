"""``calibrate``'s refusals: hostile ``AGENT@VERSION`` strings, verified or unknown targets, all before anything is
installed or written (the real calibration: tests/e2e/test_calibrate.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.adapters.calibrate import calibrate
from forkpoint.core.errors import ErrorKind, ReplayError

HOSTILE = ["claude-code@../../etc", "claude-code@2.1.331/../../x", "claude-code@..", "claude-code@2.1.331\x00",
           "claude-code@2.1.331\n", "claude-code@--registry=http://evil", "claude-code@latest",
           "claude-code@" + "9" * 10_000, "claude-code@2.1.331" + "x" * 10_000, "../claude-code@2.1.331",
           "claude-code@/tmp/x", "claude-code@2.1.331 --foo", "claude-code", "@2.1.331"]


@pytest.mark.parametrize("target", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_target_is_refused_before_anything_is_installed(target: str, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORKPOINT_CALIBRATIONS", str(tmp_path / "store"))
    installed: list[tuple[str, str]] = []

    def install(agent: str, version: str) -> Path:
        installed.append((agent, version))
        return tmp_path

    with pytest.raises(ReplayError) as refused:
        calibrate(target, install=install)
    assert refused.value.kind is ErrorKind.CONFIGURATION
    assert len(refused.value.message) < 300
    assert installed == [] and not (tmp_path / "store").exists()


def test_a_verified_or_unknown_target_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FORKPOINT_CALIBRATIONS", str(tmp_path / "store"))
    for target in ("claude-code@2.1.332", "nosuch@1.2.3", "claude-code@2.1.331"):
        with pytest.raises(ReplayError):
            calibrate(target, against="9.9.9" if target.endswith("331") else None,
                      install=lambda agent, version: tmp_path)
    assert not (tmp_path / "store").exists()


def test_swe_agent_is_refused_with_the_reason_before_anything_is_installed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SWE-agent has no installable release and no continuing binary: the refusal says so (and that its recordings
    still replay), nothing is installed or written."""
    monkeypatch.setenv("FORKPOINT_CALIBRATIONS", str(tmp_path / "store"))
    installed: list[str] = []

    def install(agent: str, version: str) -> Path:
        installed.append(version)
        return tmp_path

    with pytest.raises(ReplayError) as refused:
        calibrate("swe-agent@1.0.1", install=install)
    assert refused.value.kind is ErrorKind.UNSUPPORTED_AGENT
    assert "not on PyPI" in refused.value.message and "replays" in refused.value.message
    assert installed == [] and not (tmp_path / "store").exists()
