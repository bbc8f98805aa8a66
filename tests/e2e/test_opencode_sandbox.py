"""End to end with the REAL opencode 1.18.33 and the REAL bwrap, the workspace NOT at the recorded path.

``--sandbox bwrap``: the tool host (``opencode run`` answering forkpoint's loopback model endpoint) runs in the
sandbox with the workspace mounted at the recorded cwd and no network but that endpoint's port; ``opencode
import``/``export`` and the continued ``opencode run --session`` run there too, reaching only the bridge. The
held-out checks (``forkpoint.testing.held_out``) run a probe script as a replayed call and as a live call of the
continued agent, and look at the effects on the host.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.adapters.opencode.parse import parse_opencode
from forkpoint.testing import ScriptedModel
from forkpoint.testing.held_out import PROBE_COMMAND, PROBE_FILE, HeldOut
from forkpoint.testing.recordings import recorded_cwd
from forkpoint.testing.sandbox_e2e import SandboxCase, assert_contained
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]

VERSION = "1.18.33"
FIXTURE = Path(__file__).parents[1] / "fixtures" / "opencode" / VERSION / "bash_basic"
#: the first recorded call's command, as export.json spells it (JSON-escaped)
RECORDED_COMMAND = "printf 'hello world\\\\n' > hello.txt && ls"
CASE = SandboxCase("opencode", FIXTURE, "export.json", RECORDED_COMMAND, PROBE_COMMAND)


@pytest.fixture(autouse=True)
def _runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("opencode", VERSION) is None:
        pytest.skip(f"opencode {VERSION} is not installed (forkpoint agents install opencode@{VERSION})")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")


def test_bwrap_replay_and_continue_with_the_workspace_elsewhere(tmp_path: Path) -> None:
    workspace = CASE.workspace_elsewhere(tmp_path)
    model = ScriptedModel.from_file(FIXTURE / "script.json")
    with model.serve() as url:
        result = CASE.run(tmp_path, workspace, upstream="openai-chat", upstream_url=f"{url}/v1")
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    out = Path(result.output_dir or "")
    observations = json.loads((out / "observations.json").read_text())["observations"]
    assert observations and all(row["exact"] for row in observations), observations
    sandbox = result.metadata["sandbox"]
    assert sandbox["name"] == "bwrap" and sandbox["agent_cwd"] == str(recorded_cwd(FIXTURE))
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0
    # the live opencode ran the scripted `cat hello.txt` in the workspace, seen at the recorded cwd
    continued = parse_opencode(out / "native" / "continued" / f"{parse_opencode(FIXTURE / 'export.json').session_id}"
                                                               ".json")
    assert "hello world" in json.dumps(continued.native.messages[-2].parts)
    assert (workspace / "hello.txt").read_text() == "hello world\n"


def test_a_replayed_command_cannot_get_out(tmp_path: Path) -> None:
    """Held-out checks on the replayed call: no write outside the workspace (nor at its host path), no HOME canary,
    no host listener on loopback or the host's own address, nothing left running."""
    with HeldOut(tmp_path) as bait:
        assert_contained(bait, CASE.replay_probe(tmp_path, bait))


def test_the_continued_opencode_reaches_only_the_bridge(tmp_path: Path) -> None:
    """The live opencode's own bash runs the probe: contained like a replayed call, while the continuation
    completes through the bridge (its only reachable port)."""
    workspace = CASE.workspace_elsewhere(tmp_path)
    script = json.loads((FIXTURE / "script.json").read_text())
    with HeldOut(tmp_path) as bait:
        (workspace / PROBE_FILE).write_text(bait.script(workspace))
        model = ScriptedModel([*script["turns"][:1], [tool_use("bash", {"command": PROBE_COMMAND,
                                                                         "description": "Probe"})],
                               [text("Done.")]], seed=script["seed"])
        with model.serve() as url:
            result = CASE.run(tmp_path, workspace, upstream="openai-chat", upstream_url=f"{url}/v1")
        assert result.failure is None, result.failure
        assert result.phase == "continued" and result.metadata["model_bridge"]["validated"] >= 2
        assert_contained(bait, (Path(result.output_dir or "") / "native" / "continued" / "events.jsonl").read_text())
