"""SWE-bench-style recordings (hand-made edge cases derived from the real DeterministicModel fixture): a container
environment (DockerEnvironment at the recorded cwd) replays locally with that degradation recorded, a model class
that cannot be built here does not block replay, and a recording the companion cannot load is a refusal before any
effect (exit 10/11), never ambiguous_execution."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.core.results import ReplayResult
from forkpoint.testing.recordings import replay_recording

FIXTURE = Path(__file__).parents[2] / "fixtures" / "mini_swe_agent" / "1.17.5" / "deterministic"
TRAJECTORY = "deterministic.traj.json"
DOCKER = "minisweagent.environments.docker.DockerEnvironment"
OPENROUTER = "minisweagent.models.openrouter_model.OpenRouterModel"


@pytest.fixture(autouse=True)
def _runtime() -> None:
    if runtimes.find("mini-swe-agent", "1.17.5") is None:
        pytest.skip("mini-swe-agent 1.17.5 is not installed (forkpoint agents install mini-swe-agent@1.17.5)")


def variant(tmp_path: Path, *, environment_type: str | None = None, model_type: str | None = None,
            environment: dict[str, Any] | None = None, model: dict[str, Any] | None = None) -> Path:
    """The real recording with its config changed the way a SWE-bench run's differs."""
    data = json.loads((FIXTURE / TRAJECTORY).read_text())
    config = data["info"]["config"]
    if environment_type is not None:
        config["environment_type"] = environment_type
    if model_type is not None:
        config["model_type"] = model_type
    config["environment"].update(environment or {})
    if model is not None:
        config["model"] = model
    path = tmp_path / "variant.traj.json"
    path.write_text(json.dumps(data))
    return path


def replay(tmp_path: Path, trajectory: Path, after: int = 2) -> tuple[ReplayResult, Path]:
    result = replay_recording(FIXTURE, tmp_path, agent="mini-swe-agent", trajectory=trajectory, after=after,
                              replay_only=True)
    cwd = Path(json.loads((FIXTURE / "meta.json").read_text())["cwd"])
    return result, cwd


def observations(result: ReplayResult) -> list[bool]:
    rows = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
    return [row["exact"] for row in rows]


def test_a_docker_recording_with_an_openrouter_model_replays_locally_and_says_so(tmp_path: Path) -> None:
    model = {"model_name": "google/gemini-3-pro-preview", "model_kwargs": {"temperature": 0.0},
             "set_cache_control": None, "cost_tracking": "default"}
    trajectory = variant(tmp_path, environment_type=DOCKER, model_type=OPENROUTER, model=model, environment={
        "image": "docker.io/swebench/sweb.eval.x86_64.example:latest", "executable": "docker",
        "run_args": ["--rm"], "container_timeout": "2h", "pull_timeout": 120, "forward_env": []})
    result, cwd = replay(tmp_path, trajectory)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality) == ("replayed", "degraded")
    assert "environment_replayed_locally" in result.quality_reasons
    assert "model_class_substituted" not in result.quality_reasons  # OpenRouterModel builds without a key
    assert any(text.startswith("environment: DockerEnvironment recorded, replayed locally")
               for text in result.metadata["replay_degradations"])
    assert observations(result) == [True, True]
    assert (cwd / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"  # the sed really ran there


def test_a_model_class_that_cannot_be_built_here_does_not_block_replay(tmp_path: Path) -> None:
    result, _ = replay(tmp_path, variant(tmp_path, model_type="nosuch_vendor.models.PrivateModel"))
    assert result.failure is None, result.failure
    assert result.quality_reasons == ["model_class_substituted"]
    assert "nosuch_vendor.models.PrivateModel" in result.metadata["replay_degradations"][0]
    assert observations(result) == [True, True]


@pytest.mark.parametrize("environment_type", [
    "minisweagent.environments.extra.swerex_modal.SwerexModalEnvironment", "not.an.environment.Class"])
def test_a_recording_the_companion_cannot_load_is_refused_before_any_effect(tmp_path: Path,
                                                                            environment_type: str) -> None:
    result, cwd = replay(tmp_path, variant(tmp_path, environment_type=environment_type))
    assert result.failure is not None
    assert result.failure.category == "unsupported_tool", result.failure  # exit 11
    assert environment_type in result.failure.message and "ambiguous" not in result.failure.message
    assert (cwd / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"  # batch 2's sed never ran
