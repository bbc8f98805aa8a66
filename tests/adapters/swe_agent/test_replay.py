"""Replay-only fidelity on the constructed SWE-agent fixtures: fresh == historical at every replayable boundary.

The workspace is restored at the recorded path (``/<repo_name>``) from ``workspace-initial/``; forkpoint re-runs
the shell actions in its emulated SWE-agent session (cwd and exports carried over, 24x80 terminal, timeout) and
renders them with the recording's templates. The expected texts were written by hand in make_fixtures.py.
"""

from __future__ import annotations

import json
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.swe_agent.parse import parse_traj
from forkpoint.core.model import CallPolicy
from forkpoint.core.results import ReplayResult
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing.recordings import restored_workspace

FIXTURES = Path(__file__).parents[2] / "fixtures" / "swe_agent" / "1.1.0"


#: scenarios replayed only at their last boundary (it re-runs and compares every earlier step: CI budget)
LAST_BOUNDARY_ONLY = frozenset({"windowed", "windowed_edit", "windowed_edit_linting"})
#: scenarios replayed under --sandbox bwrap only (test_sandbox.py; CI budget)
SANDBOX_ONLY = frozenset({"windowed_edit_linting"})
#: scenarios with their own replay test (requeried attempts: more trajectory entries than steps)
OWN_TEST = frozenset({"requery"})


def _cases() -> list[tuple[str, int]]:
    cases = []
    for traj in sorted(FIXTURES.glob("*/*.traj")):
        parsed = parse_traj(traj)
        for after in range(1, parsed.complete_count + 1):
            calls = [c for b in parsed.batches[:after] for c in b.calls]
            if after not in parsed.boundary_refusals and all(c.policy is CallPolicy.FRESH for c in calls):
                cases.append((traj.parent.name, after))
    last = {scenario: max(a for s, a in cases if s == scenario) for scenario in LAST_BOUNDARY_ONLY}
    return [(scenario, after) for scenario, after in cases if last.get(scenario, after) == after]


def out_dir(result: ReplayResult) -> Path:
    assert result.output_dir is not None, result.failure
    return Path(result.output_dir)


def restored(scenario: str) -> AbstractContextManager[Path]:
    return restored_workspace(FIXTURES / scenario)


def run(scenario: str, workspace: Path, tmp_path: Path, after: int, **values: Any) -> ReplayResult:
    request = {"agent": "swe-agent", "trajectory": str(next((FIXTURES / scenario).glob("*.traj"))),
               "after_step": after, "workspace": str(workspace), "state_dir": str(tmp_path / "state"),
               "output_dir": str(tmp_path / "out"), "run_id": f"{scenario}-{after}", **values}
    return execute(build_request(request, source="test"))


def test_every_fixture_has_replayable_boundaries() -> None:
    assert {scenario for scenario, _ in _cases()} == {"shell_state", "thought_action", "timeout", "editor",
                                                      "windowed", "windowed_edit", "windowed_edit_linting", "requery"}
    assert ("windowed", 15) in _cases()  # every windowed/search step re-runs
    # every linting edit/insert step re-runs (observations from SWE-agent's real scripts and flake8)
    assert ("windowed_edit", 11) in _cases() and ("windowed_edit_linting", 6) in _cases()


@pytest.mark.parametrize(("scenario", "after"), [case for case in _cases() if case[0] not in SANDBOX_ONLY | OWN_TEST],
                         ids=lambda v: str(v))
def test_replay_only_reproduces_the_recorded_observations(scenario: str, after: int, tmp_path: Path) -> None:
    with restored(scenario) as workspace:
        result = run(scenario, workspace, tmp_path, after, replay_only=True)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("replayed", "verified", "not_started")
    out = out_dir(result)
    rows = json.loads((out / "observations.json").read_text())["observations"]
    assert len(rows) == after
    assert [row["exact"] for row in rows] == [True] * after, rows
    rebuilt = json.loads(next((out / "native" / "prefix").glob("*.traj")).read_text())
    original = json.loads(next((FIXTURES / scenario).glob("*.traj")).read_text())
    assert len(rebuilt["trajectory"]) == after
    assert [s["action"] for s in rebuilt["trajectory"]] == [s["action"] for s in original["trajectory"][:after]]
    for fresh_step, old_step in zip(rebuilt["trajectory"], original["trajectory"], strict=False):
        assert fresh_step["observation"] == old_step["observation"]
        assert fresh_step["state"] == old_step["state"]
    assert rebuilt["history"][-1]["message_type"] == "observation"
    assert rebuilt["history"] == original["history"][: len(rebuilt["history"])]
    assert "exit_status" not in rebuilt["info"] and "submission" not in rebuilt["info"]
    assert isinstance(rebuilt["replay_config"], str)


def test_requeried_attempts_are_not_re_run_and_stay_in_the_prefix(tmp_path: Path) -> None:
    """The blocked ``make`` (and the format error, and the lint-failed edit) were requeried, never executed as steps:
    the replay re-runs only the three accepted steps (the Makefile's built.txt never appears, ``ls`` matches) and
    the rebuilt prefix is the recording itself: every trajectory entry, the history the model saw."""
    with restored("requery") as workspace:
        result = run("requery", workspace, tmp_path, 3, replay_only=True)
        planted = (workspace / "built.txt").exists()
    assert result.failure is None, result.failure
    assert not planted
    rows = json.loads((out_dir(result) / "observations.json").read_text())["observations"]
    assert [row["exact"] for row in rows] == [True] * 3, rows
    rebuilt = json.loads(next((out_dir(result) / "native" / "prefix").glob("*.traj")).read_text())
    original = json.loads(next((FIXTURES / "requery").glob("*.traj")).read_text())
    for fresh_step in rebuilt["trajectory"]:
        fresh_step.pop("execution_time")
    assert rebuilt["trajectory"] == [{k: v for k, v in step.items() if k != "execution_time"}
                                     for step in original["trajectory"]]
    assert rebuilt["history"] == original["history"]


def test_fresh_text_reaches_the_queries_of_the_requeried_attempts(tmp_path: Path) -> None:
    """Step 1's fresh observation replaces its message in every later entry's query (the three requeried attempts
    asked the model with it too) but not in step 1's own query; the requery pairs stay as recorded."""
    with restored("requery") as workspace:
        (workspace / "pkg" / "calc.py").write_text("def add(a, b):\n    return a - b  # changed\n")
        result = run("requery", workspace, tmp_path, 2, replay_only=True)
    assert result.failure is None, result.failure
    rebuilt = json.loads(next((out_dir(result) / "native" / "prefix").glob("*.traj")).read_text())
    original = json.loads(next((FIXTURES / "requery").glob("*.traj")).read_text())
    fresh = rebuilt["history"][3]["content"]
    assert "# changed" in fresh and fresh != original["history"][3]["content"]
    assert rebuilt["trajectory"][0]["query"] == original["trajectory"][0]["query"]
    for at in (1, 2, 3, 4):
        assert rebuilt["trajectory"][at]["query"][3]["content"] == fresh
        assert rebuilt["trajectory"][at]["query"][4:] == original["trajectory"][at]["query"][4:]
    assert [s["observation"] for s in rebuilt["trajectory"][1:4]] == [
        s["observation"] for s in original["trajectory"][1:4]]


@pytest.mark.parametrize(("after", "entries", "messages"), [(1, 1, 4), (2, 5, 6)])
def test_a_prefix_ends_at_the_accepted_entry(after: int, entries: int, messages: int, tmp_path: Path) -> None:
    """Step 2's prefix keeps the three attempts requeried before it; step 1's stops before them."""
    result = run("requery", tmp_path, tmp_path, after, prepare_only=True)
    assert result.failure is None, result.failure
    prefix = json.loads(next((out_dir(result) / "native" / "prefix").glob("*.traj")).read_text())
    original = json.loads(next((FIXTURES / "requery").glob("*.traj")).read_text())
    assert prefix["trajectory"] == original["trajectory"][:entries]
    assert prefix["history"] == original["history"][:messages]


def test_prepare_only_cuts_the_recording(tmp_path: Path) -> None:
    result = run("shell_state", tmp_path, tmp_path, 2, prepare_only=True)
    assert result.failure is None, result.failure
    prefix = json.loads(next((out_dir(result) / "native" / "prefix").glob("*.traj")).read_text())
    original = json.loads(next((FIXTURES / "shell_state").glob("*.traj")).read_text())
    assert prefix["trajectory"] == original["trajectory"][:2]
    assert prefix["history"] == original["history"][:6]


def test_a_changed_workspace_shows_up_as_a_difference(tmp_path: Path) -> None:
    with restored("shell_state") as workspace:
        (workspace / "pkg" / "calc.py").write_text("changed\n")
        result = run("shell_state", workspace, tmp_path, 1, replay_only=True)
    assert result.failure is None
    row = json.loads((out_dir(result) / "observations.json").read_text())["observations"][0]
    assert row["exact"] is False


def test_workspace_elsewhere_is_refused(tmp_path: Path) -> None:
    result = run("shell_state", tmp_path, tmp_path, 1, replay_only=True)
    assert result.failure is not None and result.failure.category == "workspace_error"
    assert "/tmp/forkpoint-rec-swe-agent/shell_state" in result.failure.message


def test_continuation_without_a_runtime_says_swe_agent_is_not_on_pypi(tmp_path: Path) -> None:
    with restored("shell_state") as workspace:
        result = run("shell_state", workspace, tmp_path, 2, upstream="stub")
    assert result.failure is not None and result.failure.category == "configuration_error"
    assert "not on PyPI" in result.failure.message and "--agent-entrypoint" in result.failure.message
    assert result.exit_code == 2
    assert not (tmp_path / "out" / "shell_state-2").exists()  # refused before anything ran


def test_continuation_with_a_python_without_swe_agent_is_refused(tmp_path: Path) -> None:
    with restored("shell_state") as workspace:
        result = run("shell_state", workspace, tmp_path, 2, upstream="stub", agent_entrypoint=sys.executable)
    assert result.failure is not None and result.failure.category == "configuration_error"
    assert "cannot import SWE-agent" in result.failure.message


def test_a_multi_line_quoted_argument_reaches_the_editor_intact(tmp_path: Path) -> None:
    """FunctionCallingParser shell-quotes every argument: a multi-line ``file_text`` with quotes is one argv word
    after bash has read the (multi-line) action line."""
    import shlex

    data = json.loads(next((FIXTURES / "editor").glob("*.traj")).read_text())
    text = "PI = 3.14\nNAME = \"it's\"\n\tTAB = '$HOME'\n"
    path = "/tmp/forkpoint-rec-swe-agent/editor/pkg/constants.py"
    action = f"str_replace_editor create {path} --file_text {shlex.quote(text)}"
    data["trajectory"][9]["action"] = action
    create = [item for item in data["history"] if item.get("role") == "assistant"][9]
    create["action"] = action
    traj = tmp_path / "toy__editor-1.traj"
    traj.write_text(json.dumps(data, indent=2))
    with restored("editor") as workspace:
        result = run("editor", workspace, tmp_path, 10, replay_only=True, trajectory=str(traj))
        written = (workspace / "pkg" / "constants.py").read_text()
    assert result.failure is None, result.failure
    rows = json.loads((out_dir(result) / "observations.json").read_text())["observations"]
    assert [row["exact"] for row in rows] == [True] * 10
    assert written == text
