"""A real mini-swe-agent 1.17.5 recording made with its own offline DeterministicModel (scripts/
record_mini_swe_agent_fixtures.py --deterministic): prepared and replayed like any recording; only continuing it
is refused, before anything runs (the model class cannot talk to forkpoint's bridge)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.testing.recordings import replay_recording

FIXTURE = Path(__file__).parents[2] / "fixtures" / "mini_swe_agent" / "1.17.5" / "deterministic"
TRAJECTORY = "deterministic.traj.json"


def test_the_recording_was_made_by_the_deterministic_model() -> None:
    info = json.loads((FIXTURE / TRAJECTORY).read_text())["info"]
    assert info["mini_version"] == "1.17.5"
    assert info["config"]["model_type"] == "minisweagent.models.test_models.DeterministicModel"


@pytest.mark.parametrize("after", [1, 2])
def test_prepare_only_needs_no_model(after: int, tmp_path: Path) -> None:
    result = replay_recording(FIXTURE, tmp_path, agent="mini-swe-agent", trajectory=TRAJECTORY, after=after,
                              prepare_only=True)
    assert result.failure is None, result.failure
    prefix = json.loads((Path(result.output_dir or "") / "native" / "prefix" / TRAJECTORY).read_text())
    source = json.loads((FIXTURE / TRAJECTORY).read_text())
    assert prefix["messages"] == source["messages"][: 2 + 2 * after]


def test_replay_only_needs_no_model(tmp_path: Path) -> None:
    if runtimes.find("mini-swe-agent", "1.17.5") is None:
        pytest.skip("mini-swe-agent 1.17.5 is not installed (forkpoint agents install mini-swe-agent@1.17.5)")
    result = replay_recording(FIXTURE, tmp_path, agent="mini-swe-agent", trajectory=TRAJECTORY, after=2,
                              replay_only=True)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality) == ("replayed", "verified")
    rows = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
    assert [row["exact"] for row in rows] == [True, True]


def test_continuing_it_is_refused_before_anything_runs(tmp_path: Path) -> None:
    result = replay_recording(FIXTURE, tmp_path, agent="mini-swe-agent", trajectory=TRAJECTORY, after=1,
                              upstream="stub")
    assert result.failure is not None and result.failure.category == "unsupported_version"
    assert "DeterministicModel" in result.failure.message and "--replay-only" in result.failure.message
    assert not (tmp_path / "out" / "run-1").exists()
