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

import pytest

from forkpoint import runtimes
from forkpoint.testing import ScriptedModel
from forkpoint.testing.held_out import PROBE_COMMAND, PROBE_FILE, HeldOut
from forkpoint.testing.recordings import recorded_cwd
from forkpoint.testing.sandbox_e2e import SandboxCase, assert_contained
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]

VERSION = "0.61.0"
FIXTURE = Path(__file__).parents[1] / "fixtures" / "gemini_cli" / VERSION / "tools"
#: the second recorded call's command, as session.jsonl spells it
RECORDED_COMMAND = '"command":"ls; cat notes.txt"'
CASE = SandboxCase("gemini-cli", FIXTURE, "session.jsonl", RECORDED_COMMAND, f'"command":"{PROBE_COMMAND}"')


@pytest.fixture(autouse=True)
def _runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("gemini-cli", VERSION) is None:
        pytest.skip(f"gemini-cli {VERSION} is not installed (forkpoint agents install gemini-cli@{VERSION})")
    monkeypatch.setenv("GEMINI_API_KEY", "scripted-upstream-key")


def test_bwrap_replay_and_continue_with_the_workspace_elsewhere(tmp_path: Path) -> None:
    """Batch 1 (write_file) replays through the CLI's own tool in bwrap at the recorded cwd, and the continued CLI
    reads the file it made there, through the bridge (its only reachable port)."""
    workspace = CASE.workspace_elsewhere(tmp_path)
    model = ScriptedModel([[tool_use("read_file", {"file_path": "notes.txt"})], [text("Notes read.")]],
                          step_mode="counter", model="gemini-2.5-pro", seed="gemini-bwrap-e2e")
    with model.serve() as url:
        result = CASE.run(tmp_path, workspace, upstream="gemini", upstream_url=url)
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
    with HeldOut(tmp_path) as bait:
        assert_contained(bait, CASE.replay_probe(tmp_path, bait, after_step=2))


def test_the_continued_gemini_cli_reaches_only_the_bridge(tmp_path: Path) -> None:
    """The live CLI's own run_shell_command runs the probe: contained like a replayed call, while the
    continuation completes through the bridge (its only reachable port)."""
    workspace = CASE.workspace_elsewhere(tmp_path)
    with HeldOut(tmp_path) as bait:
        (workspace / PROBE_FILE).write_text(bait.script(workspace))
        model = ScriptedModel([[tool_use("run_shell_command", {"command": PROBE_COMMAND, "description": "probe"})],
                               [text("Done.")]], step_mode="counter", model="gemini-2.5-pro", seed="gemini-probe")
        with model.serve() as url:
            result = CASE.run(tmp_path, workspace, upstream="gemini", upstream_url=url)
        assert result.failure is None, result.failure
        assert result.phase == "continued" and result.metadata["model_bridge"]["validated"] == 2
        assert_contained(bait, json.dumps(model.requests[1]["body"]["contents"][-1]))
