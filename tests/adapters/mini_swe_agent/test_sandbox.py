"""mini-swe-agent under --sandbox bwrap (REAL venv, REAL bwrap): the companion and every command it re-runs see the
workspace at the recorded cwd, and the held-out checks hold (no write outside the workspace, no canary read in the
host HOME, no non-loopback connect, no process left behind)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.adapters.mini_swe_agent import tools
from forkpoint.adapters.mini_swe_agent.parse import parse_trajectory
from forkpoint.core.model import Mode, Plan, RunContext, ToolCall
from forkpoint.sandbox import open_sandbox
from forkpoint.testing.held_out import HeldOut

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")]

FIXTURE = Path(__file__).parents[2] / "fixtures" / "mini_swe_agent" / "2.4.6" / "basic"
RECORDED = "/testbed"


def _python() -> Path:
    runtime = runtimes.find("mini-swe-agent", "2.4.6")
    if runtime is None:
        pytest.skip("mini-swe-agent 2.4.6 is not installed")
    return runtime.entrypoint


def _executor(tmp_path: Path) -> tuple[tools.MiniToolExecutor, Plan]:
    workspace = tmp_path / "ws"
    shutil.copytree(FIXTURE / "workspace-initial", workspace)
    plan = Plan(parse_trajectory(FIXTURE / "trajectory.traj.json"), 1, Mode.REPLAY_ONLY, "p")
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out",
                         sandbox=open_sandbox("bwrap", workspace, RECORDED))
    return tools.MiniToolExecutor(plan, context, _python()), plan


def _call(plan: Plan, command: str) -> ToolCall:
    call = plan.calls[0]
    return ToolCall(call.call_id, "bash", {"command": command}, None, native={"action": {"command": command}})


def test_commands_run_at_the_recorded_cwd_and_write_the_workspace(tmp_path: Path) -> None:
    executor, plan = _executor(tmp_path)
    try:
        fresh = executor.run(_call(plan, "pwd; echo made > new.txt; cat calc.py"))
    finally:
        executor.close()
    assert '"output": "/testbed\\ndef add(a, b):' in str(fresh.content)
    assert (tmp_path / "ws" / "new.txt").read_text() == "made\n"


def test_the_held_out_checks(tmp_path: Path) -> None:
    executor, plan = _executor(tmp_path)
    with HeldOut(tmp_path) as bait:
        try:
            fresh = [executor.run(_call(plan, command)) for command in bait.commands()]
        finally:
            executor.close()
        assert bait.violations([str(observation.content) for observation in fresh]) == []
    assert "Network is unreachable" in str(fresh[2].content) or bait.address is None
