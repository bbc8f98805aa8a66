"""End to end with the REAL mini-swe-agent 1.17.5 and 2.4.6 venvs: replay + continue the recorded trajectories.

ScriptedModel plays the model (the only stand-in), speaking Chat Completions to litellm through the bridge.
Every recording is replayed at every boundary in a workspace restored to the recording's initial state at the
recorded path; the fresh observations must equal the historical ones exactly, the first model request must carry
exactly the rebuilt prefix, and the real agent must go on with the recording's own next turns (the script from
the boundary on: counter mode, since 2.x keeps no assistant message for a format error).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.mini_swe_agent import launch
from forkpoint.adapters.mini_swe_agent.gate import expected_from_native
from forkpoint.adapters.mini_swe_agent.parse import MiniNative, parse_trajectory
from forkpoint.core.results import ReplayResult
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import e2e_boundaries, replay_recording

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures" / "mini_swe_agent"
VERSIONS = ("1.17.5", "2.4.6")
EVERY_BOUNDARY = os.environ.get("FORKPOINT_E2E_EVERY_BOUNDARY") == "1"


def _native(fixture: Path) -> MiniNative:
    native = parse_trajectory(fixture / "trajectory.traj.json").native
    assert isinstance(native, MiniNative)
    return native


def _cases() -> list[tuple[str, str, int]]:
    cases = []
    for version in VERSIONS:
        for trajectory in sorted((FIXTURES / version).glob("*/trajectory.traj.json")):
            count = parse_trajectory(trajectory).complete_count
            # first, middle and last on the newest version; the last on the older one, and the first too of its
            # format-error recording (1.x's loop counts consecutive format errors) (sampled for CI time: the
            # envelope differs per version, the boundaries before the last repeat the same path with a shorter
            # prefix); FORKPOINT_E2E_EVERY_BOUNDARY=1 runs every boundary
            wide = version == VERSIONS[-1] or trajectory.parent.name == "format_error" or EVERY_BOUNDARY
            chosen = e2e_boundaries(range(1, count + 1)) if wide else [count]
            cases += [(version, trajectory.parent.name, after) for after in chosen]
    return cases


def _require_runtime(version: str) -> None:
    if runtimes.find("mini-swe-agent", version) is None:
        pytest.skip(f"mini-swe-agent {version} is not installed (forkpoint agents install mini-swe-agent@{version})")


def script_from(fixture: Path, after: int) -> ScriptedModel:
    """The recording's own model turns from the boundary on (the n-th continued request gets turn P + n)."""
    script = json.loads((fixture / "script.json").read_text())
    calls = _native(fixture).prefix_calls(after)
    return ScriptedModel(script["turns"][calls:], seed=script["seed"], step_mode="counter", model="scripted",
                         tools_required=script["tools_required"])


def run(fixture: Path, tmp_path: Path, after: int, **overrides: Any) -> ReplayResult:
    return replay_recording(fixture, tmp_path, agent="mini-swe-agent", trajectory="trajectory.traj.json", after=after,
                            **overrides)


@pytest.mark.parametrize(("version", "scenario", "after"), _cases(), ids=lambda v: str(v))
def test_replay_and_continue_every_boundary(
    version: str, scenario: str, after: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _require_runtime(version)
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    fixture = FIXTURES / version / scenario
    model = script_from(fixture, after)
    with model.serve() as url:
        result = run(fixture, tmp_path, after, upstream="openai-chat", upstream_url=f"{url}/v1")
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    out = Path(result.output_dir or "")
    observations = json.loads((out / "observations.json").read_text())["observations"]
    assert observations and all(row["exact"] for row in observations), observations  # fresh == historical
    bridge = result.metadata["model_bridge"]
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    assert bridge["refused"] == 0 and bridge["forwarded"] == bridge["validated"] == len(main) >= 1
    prefix = json.loads((out / "native" / "prefix" / "trajectory.traj.json").read_text())["messages"]
    native = _native(fixture)
    expected = expected_from_native("p", prefix, native.major)
    assert [json.loads(json.dumps(m)) for m in expected.messages] == [
        {k: v for k, v in m.items() if v is not None} for m in main[0]["body"]["messages"]]  # ends at O'N
    continued = json.loads((out / "native" / "continued" / "trajectory.traj.json").read_text())
    assert continued["messages"][: len(prefix)] == prefix and continued["info"]["exit_status"] == "Submitted"
    source = json.loads((fixture / "trajectory.traj.json").read_text())
    assert continued["info"]["config"]["model"]["model_kwargs"] == source["info"]["config"]["model"]["model_kwargs"]
    assert "forkpoint-bridge" not in json.dumps(continued)  # neither the bridge URL nor its dummy key remain
    assert result.continued_steps == len(main) == len(native.turns) - native.prefix_calls(after)
    next_action = json.loads((out / "next-action.json").read_text())
    assert next_action["metrics"]["same_tool_calls"] is True, next_action


@pytest.mark.parametrize("version", VERSIONS)
def test_stub_upstream_boundary_prompt_and_step_budget(version: str, tmp_path: Path) -> None:
    """The stub answers plain text (a format error for mini); the agent's own step limit stops it."""
    _require_runtime(version)
    fixture = FIXTURES / version / "basic"
    prompt = "Check the listing once more before reading."
    result = run(fixture, tmp_path, 1, upstream="stub", boundary_user_prompt=prompt, max_steps=3)
    assert result.failure is None, result.failure
    assert (result.phase, result.agent_status, result.continued_steps) == ("continued", "max_steps", 2)
    assert result.metadata["boundary_user_prompt"]["injected"] is True
    assert result.metadata["agent_exit_status"] == "LimitsExceeded"
    out = Path(result.output_dir or "")
    continued = json.loads((out / "native" / "continued" / "trajectory.traj.json").read_text())
    prompts = [m for m in continued["messages"] if m.get("content") == prompt]
    assert len(prompts) == 1 and prompts[0]["role"] == "user"
    for name in ("result.json", "replay-summary.json", "replay-events.jsonl", "manifest.json"):
        assert prompt not in (out / name).read_text()
    assert prompt not in (tmp_path / "state" / "run-1" / "bridge-log.jsonl").read_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_tampered_prefix_is_refused_and_nothing_is_forwarded(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """forkpoint expects one thing, the agent sends another: refused, nothing reaches the model, exit 40."""
    _require_runtime(version)
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    original = launch._messages

    def tampered(path: Path) -> list[Any]:
        messages = original(path)
        messages[-1] = {**messages[-1], "content": str(messages[-1]["content"]) + "\n(tampered)"}
        return messages

    monkeypatch.setattr(launch, "_messages", tampered)
    fixture = FIXTURES / version / "basic"
    model = script_from(fixture, 2)
    with model.serve() as url:
        result = run(fixture, tmp_path, 2, upstream="openai-chat", upstream_url=f"{url}/v1")
    assert result.failure is not None and result.failure.category == "continuation_error" and result.exit_code == 40
    assert "differs from the rebuilt prefix" in result.failure.message
    assert model.requests == []  # nothing forwarded
    log = [json.loads(line) for line in (tmp_path / "state" / "run-2" / "bridge-log.jsonl").read_text().splitlines()]
    assert log and log[0]["verdict"] == "refused" and not any(entry["forwarded"] for entry in log)


def test_wrong_runtime_version_is_refused_before_anything_runs(tmp_path: Path) -> None:
    _require_runtime("1.17.5")
    _require_runtime("2.4.6")
    other = runtimes.find("mini-swe-agent", "2.4.6")
    assert other is not None
    result = run(FIXTURES / "1.17.5" / "basic", tmp_path, 1, upstream="stub", agent_entrypoint=str(other.entrypoint))
    assert result.failure is not None and (result.failure.category, result.exit_code) == ("unsupported_version", 11)
    assert not (tmp_path / "out" / "run-1").exists()


@pytest.mark.parametrize("version", VERSIONS)
def test_replay_only_and_prepare_only(version: str, tmp_path: Path) -> None:
    _require_runtime(version)
    fixture = FIXTURES / version / "failing"
    replayed = run(fixture, tmp_path, 4, replay_only=True)
    assert replayed.failure is None and (replayed.phase, replayed.agent_status) == ("replayed", "not_started")
    rows = json.loads((Path(replayed.output_dir or "") / "observations.json").read_text())["observations"]
    assert [row["fresh_is_error"] for row in rows] == [True, True, True, False] and all(r["exact"] for r in rows)
    workspace = Path(json.loads((fixture / "meta.json").read_text())["cwd"])
    assert "return a + b" in (workspace / "calc.py").read_text()  # batch 4 (sed) really ran in the workspace
    prepared = run(fixture, tmp_path, 2, prepare_only=True, run_id="prep")
    assert prepared.failure is None and prepared.phase == "prepared"


def test_workspace_not_at_the_recorded_cwd_is_refused(tmp_path: Path) -> None:
    """Commands may name absolute paths under the recorded cwd: a workspace elsewhere is refused up front."""
    fixture = FIXTURES / "2.4.6" / "cd"
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(fixture / "workspace-initial", elsewhere)
    result = execute(build_request({"agent": "mini-swe-agent", "trajectory": str(fixture / "trajectory.traj.json"),
                                    "after_step": 1, "replay_only": True, "workspace": str(elsewhere),
                                    "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
                                    "run_id": "elsewhere"}, source="test"))
    assert result.failure is not None and (result.failure.category, result.exit_code) == ("workspace_error", 20)
    assert "/tmp/forkpoint-rec-mini/2.4.6/cd" in result.failure.message
    assert not (tmp_path / "out" / "elsewhere").exists()
