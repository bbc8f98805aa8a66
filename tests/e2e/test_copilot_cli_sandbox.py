"""End to end with the REAL GitHub Copilot CLI 1.0.102 and the REAL bwrap, the workspace NOT at the recorded path.

``--sandbox bwrap``: each replayed call's ``copilot -p`` (answering forkpoint's loopback tool host) runs in the
sandbox with the workspace mounted at the recorded cwd and no network but the host's port; the continued
``copilot --resume`` runs there too, reaching only the bridge. The held-out checks (``forkpoint.testing.held_out``)
run a probe script as a replayed ``bash`` call and as the live CLI's own ``bash`` call, and look at the effects on
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

VERSION = "1.0.102"
FIXTURE = Path(__file__).parents[1] / "fixtures" / "copilot_cli" / VERSION / "tools"
#: the first recorded call's command, as session.jsonl spells it
RECORDED_COMMAND = '"command":"ls; echo todo > notes.txt; cat notes.txt"'
CASE = SandboxCase("copilot-cli", FIXTURE, "session.jsonl", RECORDED_COMMAND, f'"command":"{PROBE_COMMAND}"')


@pytest.fixture(autouse=True)
def _runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("copilot-cli", VERSION) is None:
        pytest.skip(f"copilot-cli {VERSION} is not installed (forkpoint agents install copilot-cli@{VERSION})")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")



def test_a_replayed_command_cannot_get_out(tmp_path: Path) -> None:
    """Held-out checks on a replayed bash call: no write outside the workspace (nor at its host path), no HOME
    canary, no host listener on loopback or the host's own address, nothing left running."""
    with HeldOut(tmp_path) as bait:
        assert_contained(bait, CASE.replay_probe(tmp_path, bait, after_step=1))


def test_the_continued_copilot_cli_reaches_only_the_bridge(tmp_path: Path) -> None:
    """Batch 1 replays in bwrap at the recorded cwd (exact); the live CLI's own bash runs the probe: contained like
    a replayed call, while the continuation completes through the bridge (its only reachable port)."""
    workspace = CASE.workspace_elsewhere(tmp_path)
    with HeldOut(tmp_path) as bait:
        (workspace / PROBE_FILE).write_text(bait.script(workspace))
        model = ScriptedModel([[tool_use("bash", {"command": PROBE_COMMAND, "description": "probe"})],
                               [text("Done.")]], step_mode="counter", model="gpt-4.1", seed="copilot-probe")
        with model.serve() as url:
            result = CASE.run(tmp_path, workspace, upstream="openai-chat", upstream_url=url + "/v1")
        assert result.failure is None, result.failure
        assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
        assert result.metadata["model_bridge"]["validated"] == 2
        assert result.metadata["sandbox"]["agent_cwd"] == str(recorded_cwd(FIXTURE))
        assert (workspace / "notes.txt").read_text() == "todo\n"  # the replayed bash wrote it, at the host path
        seen = json.dumps(model.requests[1]["body"]["messages"][-1])
        assert_contained(bait, seen)
