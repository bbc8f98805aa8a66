"""SWE-agent under --sandbox bwrap (REAL bwrap): the emulated shell and its bundle tools run with the workspace
mounted at the recorded path from anywhere on the host, observations exact (the linting edit bundle's flake8 too,
from forkpoint's runtime cache mounted read-only); the held-out checks hold. (SWE-agent
cannot be installed here, so there is no continuation to sandbox: ``prepare_launch`` refuses it.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forkpoint.adapters.swe_agent.parse import parse_traj
from forkpoint.adapters.swe_agent.tools import SweAgentToolExecutor
from forkpoint.core.model import Mode, Plan, RunContext, ToolCall
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.sandbox import open_sandbox
from forkpoint.testing.held_out import HeldOut

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")

FIXTURES = Path(__file__).parents[2] / "fixtures" / "swe_agent" / "1.1.0"


@pytest.mark.parametrize(("scenario", "after"), [("shell_state", 3), ("editor", 2),
                                               ("windowed_edit_linting", 6)])
def test_replay_with_the_workspace_elsewhere(scenario: str, after: int, tmp_path: Path) -> None:
    fixture = FIXTURES / scenario
    recorded = json.loads((fixture / "meta.json").read_text())["cwd"]
    workspace = tmp_path / "elsewhere" / "ws"
    shutil.copytree(fixture / "workspace-initial", workspace)
    result = execute(build_request({
        "agent": "swe-agent", "trajectory": str(next(fixture.glob("*.traj"))), "after_step": after,
        "workspace": str(workspace), "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
        "run_id": "run", "sandbox": "bwrap", "replay_only": True}, source="test"))
    assert result.failure is None, result.failure
    assert (result.phase, result.quality) == ("replayed", "verified")
    rows = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
    assert len(rows) == after and all(row["exact"] for row in rows), rows
    assert result.metadata["sandbox"]["agent_cwd"] == recorded


def test_the_held_out_checks(tmp_path: Path) -> None:
    fixture = FIXTURES / "shell_state"
    workspace = tmp_path / "ws"
    shutil.copytree(fixture / "workspace-initial", workspace)
    plan = Plan(parse_traj(next(fixture.glob("*.traj"))), 1, Mode.REPLAY_ONLY, "p")
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out",
                         sandbox=open_sandbox("bwrap", workspace, "/testbed"))
    executor = SweAgentToolExecutor(plan, context)
    template = plan.calls[0]
    with HeldOut(tmp_path) as bait:
        try:
            fresh = [executor.run(ToolCall(f"held-{i}", template.name, {**template.arguments, "action": command},
                                           None, native=template.native))
                     for i, command in enumerate(bait.commands())]
        finally:
            executor.close()
        assert bait.violations([str(observation.content) for observation in fresh]) == []
