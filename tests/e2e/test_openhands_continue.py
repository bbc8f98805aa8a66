"""End to end with the REAL OpenHands 0.62.0 (its own venv, forkpoint's companion runner): replay + continue.

ScriptedModel plays the model upstream (the only stand-in). Every recorded trajectory is replayed at every boundary
in a fresh workspace at the recorded path: OpenHands' ReplayManager re-runs batches 1..N on the CLI runtime, the
fresh observations must equal the historical ones (no normalisation needed: the CLI runtime's outputs are
deterministic here), and the continued OpenHands must pass the gate with its first request and finish the scripted
task. Negative cases: a tampered prefix is refused with nothing forwarded; an unverified version exits 11.
"""

from __future__ import annotations

import json
import os
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.openhands import launch
from forkpoint.adapters.openhands.parse import parse_events
from forkpoint.core.model import JsonObject, Plan
from forkpoint.core.results import ReplayResult
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import restored_workspace

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures" / "openhands" / "0.62.0"
VERSION = "0.62.0"


def _cases() -> list[tuple[str, int]]:
    """The last boundary of every scenario (each case starts a real OpenHands twice, ~20 s: the boundaries before it
    take the same path with fewer replayed actions; boundary 1 is continued by
    test_the_step_budget_and_a_boundary_prompt_in_one_continuation; benchmarks/continuation_fidelity covers every
    boundary; FORKPOINT_E2E_EVERY_BOUNDARY=1 runs them all here)."""
    counts = [(t.parent.name, parse_events(t).complete_count) for t in sorted(FIXTURES.glob("*/trajectory.json"))]
    if os.environ.get("FORKPOINT_E2E_EVERY_BOUNDARY") == "1":
        return [(name, n) for name, count in counts for n in range(1, count + 1)]
    return [(name, count) for name, count in counts]


@pytest.fixture(autouse=True)
def _runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("openhands", VERSION) is None:
        pytest.skip(f"openhands {VERSION} is not installed (forkpoint agents install openhands@{VERSION})")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")


def workspace(scenario: str) -> AbstractContextManager[Path]:
    return restored_workspace(FIXTURES / scenario)


def run(scenario: str, cwd: Path, tmp_path: Path, after: int, trajectory: Path | None = None,
        **values: Any) -> ReplayResult:
    request = {"agent": "openhands", "trajectory": str(trajectory or FIXTURES / scenario / "trajectory.json"),
               "after_step": after, "workspace": str(cwd), "state_dir": str(tmp_path / "state"),
               "output_dir": str(tmp_path / "out"), "run_id": f"{scenario}-{after}", **values}
    return execute(build_request(request, source="test"))


def out_dir(result: ReplayResult) -> Path:
    assert result.output_dir is not None, result.failure
    return Path(result.output_dir)


def observations(result: ReplayResult) -> list[JsonObject]:
    rows: list[JsonObject] = json.loads((out_dir(result) / "observations.json").read_text())["observations"]
    return rows


def lost_output(result: ReplayResult, scenario: str, call_id: str) -> bool:
    """The one documented OpenHands 0.62.0 volatility (docs/adapters/openhands.md): the CLI runtime loses the WHOLE
    output of a command that exits before its first poll (more likely on a loaded machine). True only when the fresh
    ``run`` observation is the recorded one with an empty output and everything else (exit code, cwd) equal."""
    rebuilt = json.loads(next((out_dir(result) / "native" / "prefix").glob("*.json")).read_text())
    original = json.loads((FIXTURES / scenario / "trajectory.json").read_text())

    def observation(events: list[JsonObject]) -> JsonObject:
        return next(e for e in events if isinstance(e.get("observation"), str)
                    and (e.get("tool_call_metadata") or {}).get("tool_call_id") == call_id)

    fresh, old = observation(rebuilt), observation(original)
    return (fresh["observation"] == old["observation"] == "run" and fresh["content"] == "" and old["content"] != ""
            and fresh["extras"] == old["extras"])


@pytest.mark.parametrize(("scenario", "after"), _cases(), ids=lambda v: str(v))
def test_replay_and_continue_every_boundary(scenario: str, after: int, tmp_path: Path) -> None:
    model = ScriptedModel.from_file(FIXTURES / scenario / "script.json", model="scripted")
    with workspace(scenario) as cwd, model.serve() as url:
        result = run(scenario, cwd, tmp_path, after, upstream="openai-chat", upstream_url=f"{url}/v1")
        final = {p.relative_to(cwd).as_posix(): p.read_bytes() for p in cwd.rglob("*") if p.is_file()}
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    rows = observations(result)
    assert rows and all(row["exact"] or lost_output(result, scenario, row["id"]) for row in rows), rows
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0 and bridge["forwarded"] == bridge["validated"]
    script_turns = len(json.loads((FIXTURES / scenario / "script.json").read_text())["turns"])
    assert result.continued_steps == script_turns - after  # the scripted rest of the task, finish included
    assert len(model.requests) == bridge["forwarded"]
    first = model.requests[0]["body"]["messages"]
    assert first[-1]["role"] == "tool"  # the first live request ends at the last fresh observation
    next_action = json.loads((out_dir(result) / "next-action.json").read_text())
    assert next_action["metrics"]["same_tool_calls"] is True
    if scenario == "basic":
        assert final["pkg/calc.py"] == b"def add(a, b):\n    return a + b\n"
    continued = parse_events(next((out_dir(result) / "native" / "continued").glob("*.json")))
    assert continued.complete_count >= after


def test_replay_only_reproduces_the_recorded_observations(tmp_path: Path) -> None:
    with workspace("parallel") as cwd:
        result = run("parallel", cwd, tmp_path, 4, replay_only=True)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("replayed", "verified", "not_started")
    rows = observations(result)
    assert len(rows) == 6 and all(row["exact"] or lost_output(result, "parallel", row["id"]) for row in rows), rows
    rebuilt = json.loads(next((out_dir(result) / "native" / "prefix").glob("*.json")).read_text())
    original = json.loads((FIXTURES / "parallel" / "trajectory.json").read_text())
    assert [e["id"] for e in rebuilt] == [e["id"] for e in original if e["id"] <= rebuilt[-1]["id"]]


def test_a_tampered_prefix_is_refused_with_nothing_forwarded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """OpenHands is handed an observation other than the rebuilt prefix's: its first request must be refused."""
    original = launch.supplied_observations

    def tampered(plan: Plan, events: list[JsonObject]) -> list[JsonObject]:
        out = original(plan, events)
        out[-1] = {**out[-1], "content": str(out[-1].get("content")) + "tampered\n"}
        return out

    monkeypatch.setattr(launch, "supplied_observations", tampered)
    model = ScriptedModel.from_file(FIXTURES / "basic" / "script.json", model="scripted")
    with workspace("basic") as cwd, model.serve() as url:
        result = run("basic", cwd, tmp_path, 2, upstream="openai-chat", upstream_url=f"{url}/v1")
    assert result.failure is not None and result.failure.category == "continuation_error"
    assert "refused" in result.failure.message and "messages[5]" in result.failure.message
    assert model.requests == []  # nothing reached the upstream
    assert result.exit_code == 40


def test_an_unverified_version_exits_11_when_a_verified_one_is_required(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "basic" / "trajectory.json").read_text())
    data[0]["args"]["openhands_version"] = "0.61.0"
    trajectory = tmp_path / "old.json"
    trajectory.write_text(json.dumps(data))
    result = run("basic", tmp_path, tmp_path, 1, trajectory=trajectory, upstream="stub", require_verified_version=True)
    assert result.failure is not None and result.failure.category == "unsupported_version"
    assert result.exit_code == 11 and "0.61.0" in result.failure.message
    assert not (tmp_path / "out").exists()
    prepared = run("basic", tmp_path, tmp_path, 1, trajectory=trajectory, prepare_only=True)  # issue 28: degraded
    assert prepared.failure is None and (prepared.quality, prepared.recorded_version) == ("degraded", "0.61.0")
    assert prepared.agent is not None and prepared.agent.tool_semantics_version == "0.62.0"


def test_a_workspace_elsewhere_is_refused(tmp_path: Path) -> None:
    result = run("basic", tmp_path, tmp_path, 1, replay_only=True)
    assert result.failure is not None and result.failure.category == "workspace_error"
    assert result.exit_code == 20 and "/tmp/forkpoint-rec-openhands/basic" in result.failure.message


def test_the_step_budget_and_a_boundary_prompt_in_one_continuation(tmp_path: Path) -> None:
    """One continuation at boundary 1 (one OpenHands start pair instead of three: CI time) observes the replay of
    the first boundary, the boundary prompt ending the first request, and the step budget: the prompt is replayed
    as one more action, so it must not eat the live step (max_iterations = 1 replayed + 1 prompt + 1 live)."""
    prompt = "Please double-check the file first."
    model = ScriptedModel.from_file(FIXTURES / "basic" / "script.json", model="scripted")
    with workspace("basic") as cwd, model.serve() as url:
        result = run("basic", cwd, tmp_path, 1, upstream="openai-chat", upstream_url=f"{url}/v1", max_steps=2,
                     boundary_user_prompt=prompt)
    assert result.failure is None, result.failure
    rows = observations(result)
    assert len(rows) == 1 and all(row["exact"] or lost_output(result, "basic", row["id"]) for row in rows), rows
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0 and bridge["forwarded"] == bridge["validated"]
    last = model.requests[0]["body"]["messages"][-1]
    assert last["role"] == "user" and last["content"][0]["text"] == prompt
    assert result.metadata["boundary_user_prompt"]["injected"] is True
    for name in ("result.json", "manifest.json", "replay-events.jsonl", "observations.json"):
        assert prompt not in (out_dir(result) / name).read_text()
    assert (result.agent_status, result.continued_steps) == ("max_steps", 1)
    assert result.metadata["openhands_max_iterations"] == 3
