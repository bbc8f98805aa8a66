"""End to end with the REAL Qwen Code 0.24.4 and the REAL bwrap, the workspace NOT at the recorded path.

``--sandbox bwrap``: the replayed calls run through the CLI's own tools (one ``qwen -p`` answering forkpoint's
loopback tool host) in the sandbox with the workspace mounted at the recorded cwd and no network but the host's
port; the continued ``qwen --resume`` runs there too, reaching only the bridge. The held-out checks
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
from forkpoint.testing.held_out import PROBE_COMMAND, HeldOut
from forkpoint.testing.sandbox_e2e import SandboxCase, assert_contained
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]

VERSION = "0.24.4"
FIXTURE = Path(__file__).parents[1] / "fixtures" / "qwen_code" / VERSION / "tools"
CWD = "/tmp/forkpoint-rec-qwen/tools"
#: the second recorded call's command, as session.jsonl spells it
RECORDED_COMMAND = '"command":"ls; cat notes.txt"'
CASE = SandboxCase("qwen-code", FIXTURE, "session.jsonl", RECORDED_COMMAND, f'"command":"{PROBE_COMMAND}"')


@pytest.fixture(autouse=True)
def _runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("qwen-code", VERSION) is None:
        pytest.skip(f"qwen-code {VERSION} is not installed (forkpoint agents install qwen-code@{VERSION})")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")



def test_bwrap_replay_and_continue_with_the_workspace_elsewhere(tmp_path: Path) -> None:
    """Batch 1 (write_file at the recorded absolute path) replays through the CLI's own tool in bwrap at the
    recorded cwd, and the continued CLI reads the file it made there, through the bridge (its only reachable port)."""
    workspace = CASE.workspace_elsewhere(tmp_path)
    model = ScriptedModel([[tool_use("read_file", {"file_path": f"{CWD}/notes.txt"})], [text("Notes read.")]],
                          step_mode="counter", model="qwen3-coder-plus", seed="qwen-bwrap-e2e")
    with model.serve() as url:
        result = CASE.run(tmp_path, workspace, upstream="openai-chat", upstream_url=f"{url}/v1")
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    observations = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
    assert observations and all(row["exact"] for row in observations), observations
    sandbox = result.metadata["sandbox"]
    assert sandbox["name"] == "bwrap" and sandbox["agent_cwd"] == CWD
    assert (workspace / "notes.txt").read_text() == "todo\n"  # written by the replayed write_file, at the host path
    second = model.requests[1]["body"]["messages"][-1]
    assert second["role"] == "tool" and second["content"] == [{"type": "text", "text": "todo\n"}]


def test_a_replayed_command_cannot_get_out(tmp_path: Path) -> None:
    """Held-out checks on a replayed run_shell_command: no write outside the workspace (nor at its host path), no
    HOME canary, no host listener on loopback or the host's own address, nothing left running."""
    with HeldOut(tmp_path) as bait:
        assert_contained(bait, CASE.replay_probe(tmp_path, bait, after_step=2))
