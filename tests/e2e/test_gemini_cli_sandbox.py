"""End to end with the REAL Gemini CLI 0.61.0 and the REAL bwrap, the workspace NOT at the recorded path.

``--sandbox bwrap``: the replayed calls run through the CLI's own tools (``gemini -p`` answering forkpoint's
loopback tool host) in the sandbox with the workspace mounted at the recorded cwd and no network but the host's
port; the continued ``gemini --session-file`` runs there too, reaching only the bridge. The held-out checks
(``forkpoint.testing.held_out``) run a probe script as a replayed ``run_shell_command`` and look at the effects on
the host.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.core.results import ReplayResult
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing import ScriptedModel
from forkpoint.testing.held_out import PROBE_COMMAND, PROBE_FILE, HeldOut
from forkpoint.testing.recordings import recorded_cwd
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]

VERSION = "0.61.0"
FIXTURE = Path(__file__).parents[1] / "fixtures" / "gemini_cli" / VERSION / "tools"
#: the second recorded call's command, as session.jsonl spells it
RECORDED_COMMAND = '"command":"ls; cat notes.txt"'


@pytest.fixture(autouse=True)
def _runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("gemini-cli", VERSION) is None:
        pytest.skip(f"gemini-cli {VERSION} is not installed (forkpoint agents install gemini-cli@{VERSION})")
    monkeypatch.setenv("GEMINI_API_KEY", "scripted-upstream-key")


def workspace_elsewhere(tmp_path: Path) -> Path:
    workspace = tmp_path / "not-the-recorded-path" / "ws"
    shutil.copytree(FIXTURE / "workspace-initial", workspace)
    return workspace


def run(tmp_path: Path, workspace: Path, trajectory: Path, **overrides: Any) -> ReplayResult:
    values: dict[str, Any] = {"agent": "gemini-cli", "trajectory": str(trajectory), "workspace": str(workspace),
                              "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
                              "run_id": "run", "sandbox": "bwrap", **overrides}
    return execute(build_request(values, source="test"))


def test_bwrap_replay_and_continue_with_the_workspace_elsewhere(tmp_path: Path) -> None:
    """Batch 1 (write_file) replays through the CLI's own tool in bwrap at the recorded cwd, and the continued CLI
    reads the file it made there, through the bridge (its only reachable port)."""
    workspace = workspace_elsewhere(tmp_path)
    model = ScriptedModel([[tool_use("read_file", {"file_path": "notes.txt"})], [text("Notes read.")]],
                          step_mode="counter", model="gemini-2.5-pro", seed="gemini-bwrap-e2e")
    with model.serve() as url:
        result = run(tmp_path, workspace, FIXTURE / "session.jsonl", after_step=1, upstream="gemini",
                     upstream_url=url)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    out = Path(result.output_dir or "")
    observations = json.loads((out / "observations.json").read_text())["observations"]
    assert observations and all(row["exact"] for row in observations), observations
    sandbox = result.metadata["sandbox"]
    assert sandbox["name"] == "bwrap" and sandbox["agent_cwd"] == str(recorded_cwd(FIXTURE))
    assert (workspace / "notes.txt").read_text() == "todo\n"  # written by the replayed write_file, at the host path
    # the live CLI's read_file ran in the workspace, seen at the recorded cwd
    second = model.requests[1]["body"]["contents"][-1]["parts"][0]["functionResponse"]
    assert second["name"] == "read_file" and second["response"] == {"output": "todo\n"}


def test_a_replayed_command_cannot_get_out(tmp_path: Path) -> None:
    """Held-out checks on a replayed run_shell_command: no write outside the workspace (nor at its host path), no
    HOME canary, no host listener on loopback or the host's own address, nothing left running."""
    workspace = workspace_elsewhere(tmp_path)
    with HeldOut(tmp_path) as probes:
        (workspace / PROBE_FILE).write_text(probes.script(workspace))
        source = (FIXTURE / "session.jsonl").read_text()
        assert RECORDED_COMMAND in source
        trajectory = tmp_path / "probing-session.jsonl"
        trajectory.write_text(source.replace(RECORDED_COMMAND, f'"command":"{PROBE_COMMAND}"'))
        result = run(tmp_path, workspace, trajectory, after_step=2, replay_only=True)
        assert result.failure is None, result.failure
        rows = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
        fresh = json.dumps([row["fresh_preview"] for row in rows])
        assert "probed" in fresh and "canary-hidden" in fresh and "loopback-unreachable" in fresh, fresh
        assert "outside-refused" in fresh and "host-path-refused" in fresh, fresh
        assert probes.address is None or "address-unreachable" in fresh, fresh
        assert probes.violations(fresh) == []


def test_the_continued_gemini_cli_reaches_only_the_bridge(tmp_path: Path) -> None:
    """The live CLI's own run_shell_command runs the probe: contained like a replayed call, while the
    continuation completes through the bridge (its only reachable port)."""
    workspace = workspace_elsewhere(tmp_path)
    with HeldOut(tmp_path) as probes:
        (workspace / PROBE_FILE).write_text(probes.script(workspace))
        model = ScriptedModel([[tool_use("run_shell_command", {"command": PROBE_COMMAND, "description": "probe"})],
                               [text("Done.")]], step_mode="counter", model="gemini-2.5-pro", seed="gemini-probe")
        with model.serve() as url:
            result = run(tmp_path, workspace, FIXTURE / "session.jsonl", after_step=1, upstream="gemini",
                         upstream_url=url)
        assert result.failure is None, result.failure
        assert result.phase == "continued" and result.metadata["model_bridge"]["validated"] == 2
        seen = json.dumps(model.requests[1]["body"]["contents"][-1])
        assert "probed" in seen and "loopback-unreachable" in seen and "canary-hidden" in seen, seen
        assert "outside-refused" in seen and (probes.address is None or "address-unreachable" in seen), seen
        assert probes.violations(seen) == []
