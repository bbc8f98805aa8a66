"""End to end with the REAL OpenHands 0.62.0 and the REAL bwrap, the workspace NOT at the recorded path (one
boundary: OpenHands is slow to start). The runner sees the workspace at the recorded cwd for the replay (no
network) and the continuation (its own network namespace with only the bridge's port relayed in)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing import ScriptedModel

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")]

FIXTURE = Path(__file__).parents[1] / "fixtures" / "openhands" / "0.62.0" / "basic"


def test_bwrap_replay_and_continue_with_the_workspace_elsewhere(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("openhands", "0.62.0") is None:
        pytest.skip("openhands 0.62.0 is not installed (forkpoint agents install openhands@0.62.0)")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    recorded = json.loads((FIXTURE / "meta.json").read_text())["cwd"]
    workspace = tmp_path / "elsewhere" / "ws"
    if (FIXTURE / "workspace-initial").is_dir():
        shutil.copytree(FIXTURE / "workspace-initial", workspace)
    else:  # git keeps no empty folder: the recording started in an empty workspace
        workspace.mkdir(parents=True)
    model = ScriptedModel.from_file(FIXTURE / "script.json", model="scripted")
    with model.serve() as url:
        result = execute(build_request({
            "agent": "openhands", "trajectory": str(FIXTURE / "trajectory.json"), "after_step": 2,
            "workspace": str(workspace), "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
            "run_id": "run", "sandbox": "bwrap", "upstream": "openai-chat", "upstream_url": f"{url}/v1"},
            source="test"))
    assert result.failure is None, result.failure
    assert (result.phase, result.agent_status) == ("continued", "completed")
    rows = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
    assert rows and all(row["exact"] for row in rows), rows
    assert result.metadata["sandbox"]["agent_cwd"] == recorded
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0
    assert (workspace / "pkg" / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_the_held_out_checks(tmp_path: Path) -> None:
    """A recorded OpenHands command replayed by its runner under bwrap: no write outside the workspace, no canary
    read in the host HOME, no non-loopback connect, no process left behind."""
    from forkpoint.testing.held_out import HeldOut

    if runtimes.find("openhands", "0.62.0") is None:
        pytest.skip("openhands 0.62.0 is not installed")
    workspace = tmp_path / "elsewhere" / "ws"
    workspace.mkdir(parents=True)
    with HeldOut(tmp_path) as bait:
        command = "; ".join(bait.commands())
        events = json.loads((FIXTURE / "trajectory.json").read_text())
        first = next(event for event in events if event.get("action") == "run")
        original = first["args"]["command"]
        text = json.dumps(events).replace(json.dumps(original)[1:-1], json.dumps(command)[1:-1])
        trajectory = tmp_path / "hostile.json"
        trajectory.write_text(text)
        result = execute(build_request({
            "agent": "openhands", "trajectory": str(trajectory), "after_step": 1, "workspace": str(workspace),
            "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"), "run_id": "run",
            "sandbox": "bwrap", "replay_only": True}, source="test"))
        assert result.failure is None, result.failure
        fresh = next((Path(result.output_dir or "") / "native" / "prefix").glob("*.json")).read_text()
        assert "started" in fresh  # the hostile command really ran
        assert bait.violations([fresh]) == []


def test_a_gui_session_recording_replays(tmp_path: Path) -> None:
    """A GUI-mode recording (OpenHands' tests/runtime/trajs/basic_gui_mode.json shape): the ENVIRONMENT's
    change_agent_state action and agent_state_changed observations around the task. ReplayManager drops ENVIRONMENT
    events; counted as a step, the controller used to take one step more than it replayed, call the model (nothing
    listens) and leave the run ``ambiguous_execution``. Recorded at OpenHands' default /workspace, without recall."""
    if runtimes.find("openhands", "0.62.0") is None:
        pytest.skip("openhands 0.62.0 is not installed")
    recorded = json.loads((FIXTURE / "meta.json").read_text())["cwd"]
    events = [e for e in json.loads((FIXTURE / "trajectory.json").read_text().replace(recorded, "/workspace"))
              if e.get("action") != "recall" and e.get("cause") != 2]
    for event in events:
        if event["id"]:  # room for the GUI events before the task, ids kept in order
            event["id"] += 100
        if isinstance(event.get("cause"), int):
            event["cause"] += 100
    gui = [{"id": 1, "timestamp": "2025-01-01T00:00:00", "source": "environment", "message": "", "observation":
            "agent_state_changed", "content": "", "extras": {"agent_state": "loading"}},
           {"id": 2, "timestamp": "2025-01-01T00:00:00", "source": "environment",
            "message": "Agent state changed to init", "action": "change_agent_state",
            "args": {"agent_state": "init", "thought": ""}},
           {"id": 3, "timestamp": "2025-01-01T00:00:00", "source": "environment", "message": "No observation",
            "cause": 2, "observation": "null", "content": "", "extras": {}}]
    trajectory = tmp_path / "gui.json"
    trajectory.write_text(json.dumps([events[0], *gui, *events[1:]]))
    workspace = tmp_path / "elsewhere" / "ws"
    workspace.mkdir(parents=True)
    result = execute(build_request({
        "agent": "openhands", "trajectory": str(trajectory), "after_step": 1, "workspace": str(workspace),
        "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"), "run_id": "run",
        "sandbox": "bwrap", "replay_only": True}, source="test"))
    assert result.failure is None, result.failure
    assert result.metadata["sandbox"]["agent_cwd"] == "/workspace"
    rows = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
    assert len(rows) == 1 and rows[0]["exact"], rows
    assert (workspace / "pkg" / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"
