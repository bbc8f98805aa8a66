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
                                               ("windowed_edit_linting", 6), ("timeout", 3)])
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


def test_one_sandbox_serves_the_replays_actions(tmp_path: Path) -> None:
    """The actions of one replay share one bwrap (``Sandbox.executor``), as SWE-agent ran them in one container: a
    file an action leaves in /tmp is there for the next one (one bwrap per action gave each a private /tmp, at ~2x
    local per call: docs/benchmarks.md §5), and it is gone with the executor (the next replay's /tmp is empty)."""
    fixture = FIXTURES / "shell_state"
    plan = Plan(parse_traj(next(fixture.glob("*.traj"))), 1, Mode.REPLAY_ONLY, "p")
    template = plan.calls[0]

    def action(executor: SweAgentToolExecutor, call_id: str, command: str) -> str:
        return str(executor.run(ToolCall(call_id, template.name, {**template.arguments, "action": command}, None,
                                         native=template.native)).content)

    outputs = []
    for index in range(2):
        workspace = tmp_path / f"ws{index}"
        workspace.mkdir()
        context = RunContext(workspace, tmp_path / f"state{index}", tmp_path / f"out{index}",
                             sandbox=open_sandbox("bwrap", workspace, "/testbed"))
        executor = SweAgentToolExecutor(plan, context)
        try:
            outputs.append(action(executor, "a", "cat /tmp/left-by-a 2>&1; echo kept > /tmp/left-by-a"))
            outputs.append(action(executor, "b", "cat /tmp/left-by-a"))
        finally:
            executor.close()
    assert "No such file" in outputs[0] and "kept" in outputs[1], outputs
    assert "No such file" in outputs[2] and "kept" in outputs[3], outputs


def test_the_shared_sandbox_in_an_image_root(tmp_path: Path) -> None:
    """In an image root (bash and coreutils' echo with their libraries, nothing else) the pty helper, a host program
    on forkpoint's interpreter, runs on the host's loader inside the replay's one sandbox (``host_command``); the
    action is the image's bash. (Started as is, the helper found no libm in the image.)"""
    from forkpoint.testing.images import host_programs_root

    root = tmp_path / "root"
    host_programs_root(root, ["/bin/bash", "/bin/sh", "/bin/echo"])
    plan = Plan(parse_traj(next((FIXTURES / "shell_state").glob("*.traj"))), 1, Mode.REPLAY_ONLY, "p")
    template = plan.calls[0]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out",
                         sandbox=open_sandbox("bwrap", workspace, "/testbed", rootfs=str(root)))
    executor = SweAgentToolExecutor(plan, context)
    try:
        fresh = [executor.run(ToolCall(f"c{n}", template.name, {**template.arguments, "action": f"echo out-{n}"},
                                       None, native=template.native)) for n in (1, 2)]
    finally:
        executor.close()
    assert "out-1" in str(fresh[0].content) and "out-2" in str(fresh[1].content), fresh
