"""End to end with the REAL mini-swe-agent 2.4.6 venv and the REAL bwrap, the workspace NOT at the recorded path.

The recording's cwd is rewritten to ``/testbed`` (a SWE-bench-style path that does not exist on this host); the
workspace lives in the test's temp dir. ``--sandbox bwrap``: the companion (and every command it re-runs) sees the
workspace at /testbed, the fresh observations equal the historical ones, and the continued agent (a new companion
in its own network namespace, the bridge's port relayed into it) goes on through the bridge with the recording's
own next turns.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing import ScriptedModel

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")]

FIXTURE = Path(__file__).parents[1] / "fixtures" / "mini_swe_agent" / "2.4.6" / "basic"
RECORDED = "/testbed"


def at_testbed(tmp_path: Path) -> Path:
    """The real recording, made in /testbed (its environment's cwd is the recorded cwd)."""
    data = json.loads((FIXTURE / "trajectory.traj.json").read_text())
    data["info"]["config"]["environment"]["cwd"] = RECORDED
    path = tmp_path / "testbed.traj.json"
    path.write_text(json.dumps(data))
    return path


def test_bwrap_replay_and_continue_with_the_workspace_elsewhere(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("mini-swe-agent", "2.4.6") is None:
        pytest.skip("mini-swe-agent 2.4.6 is not installed (forkpoint agents install mini-swe-agent@2.4.6)")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    workspace = tmp_path / "not-the-recorded-path" / "ws"
    shutil.copytree(FIXTURE / "workspace-initial", workspace)
    script = json.loads((FIXTURE / "script.json").read_text())
    after = 3
    model = ScriptedModel(script["turns"][after:], seed=script["seed"], step_mode="counter", model="scripted",
                          tools_required=script["tools_required"])
    values: dict[str, Any] = {
        "agent": "mini-swe-agent", "trajectory": str(at_testbed(tmp_path)), "after_step": after,
        "workspace": str(workspace), "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
        "run_id": "run", "sandbox": "bwrap", "upstream": "openai-chat"}
    with model.serve() as url:
        result = execute(build_request({**values, "upstream_url": f"{url}/v1"}, source="test"))
    assert result.failure is None, result.failure
    assert (result.phase, result.agent_status) == ("continued", "completed")
    out = Path(result.output_dir or "")
    observations = json.loads((out / "observations.json").read_text())["observations"]
    assert len(observations) == after and all(row["exact"] for row in observations), observations
    sandbox = result.metadata["sandbox"]
    assert sandbox["name"] == "bwrap" and sandbox["agent_cwd"] == RECORDED
    assert result.metadata["companion_reused"] is False  # the replay's had no network: a new one behind the relay
    bridge = result.metadata["model_bridge"]
    assert bridge["refused"] == 0 and bridge["validated"] >= 1
    continued = json.loads((out / "native" / "continued" / "testbed.traj.json").read_text())
    assert continued["info"]["exit_status"] == "Submitted"
    # the continued agent's sed ran in the host workspace, seen as /testbed inside
    assert (workspace / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    assert not Path(RECORDED).exists()
