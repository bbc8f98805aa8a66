"""End to end with the REAL Pi 0.83.0 (its Node runner) and the REAL bwrap, the workspace NOT at the recorded path.

``--sandbox bwrap``: every replayed call's ``node runner.mjs tool`` runs in the sandbox with the workspace mounted at
the recorded cwd, no network, the runtime read-only; the continued ``node runner.mjs continue`` runs there too,
reaching only the bridge. The held-out checks (``forkpoint.testing.held_out``) run a probe script as a replayed call
and as a live call of the continued agent, and look at the effects on the host.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.runtimes import fd as fd_runtime
from forkpoint.testing import ScriptedModel
from forkpoint.testing.held_out import PROBE_COMMAND, PROBE_FILE, HeldOut
from forkpoint.testing.recordings import recorded_cwd
from forkpoint.testing.sandbox_e2e import SandboxCase, assert_contained
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]

VERSION = "0.83.0"
FIXTURE = Path(__file__).parents[1] / "fixtures" / "pi" / VERSION / "single_bash"
#: the first recorded call's command
RECORDED_COMMAND = "ls && cat notes.txt"
CASE = SandboxCase("pi", FIXTURE, "events.jsonl", RECORDED_COMMAND, PROBE_COMMAND)


@pytest.fixture(autouse=True)
def _runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("pi", VERSION) is None:
        pytest.skip(f"pi {VERSION} is not installed (forkpoint agents install pi@{VERSION})")
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
    # the live Pi ran the scripted `wc -l notes.txt` in the workspace, seen at the recorded cwd
    events = (out / "native" / "continued" / "events.jsonl").read_text()
    assert "2 notes.txt" in events


def test_a_replayed_command_cannot_get_out(tmp_path: Path) -> None:
    """Held-out checks on the replayed call: no write outside the workspace (nor at its host path), no HOME canary,
    no host listener on loopback or the host's own address, nothing left running."""
    with HeldOut(tmp_path) as bait:
        assert_contained(bait, CASE.replay_probe(tmp_path, bait))


def test_the_continued_pi_reaches_only_the_bridge(tmp_path: Path) -> None:
    """The live Pi's own bash runs the probe: contained like a replayed call, while the continuation
    completes through the bridge (its only reachable port)."""
    workspace = CASE.workspace_elsewhere(tmp_path)
    script = json.loads((FIXTURE / "script.json").read_text())
    with HeldOut(tmp_path) as bait:
        (workspace / PROBE_FILE).write_text(bait.script(workspace))
        model = ScriptedModel([*script["turns"][:1], [tool_use("bash", {"command": PROBE_COMMAND}, "call_probe")],
                               [text("Done.")]], seed=script["seed"])
        with model.serve() as url:
            result = CASE.run(tmp_path, workspace, upstream="openai-chat", upstream_url=f"{url}/v1")
        assert result.failure is None, result.failure
        assert result.phase == "continued" and result.metadata["model_bridge"]["validated"] >= 2
        assert_contained(bait, (Path(result.output_dir or "") / "native" / "continued" / "events.jsonl").read_text())


OPTIONAL = FIXTURE.parent / "optional_tools"


def test_find_runs_forkpoints_fd_inside_the_sandbox(tmp_path: Path) -> None:
    """Pi's find needs fd >= 9: forkpoint's fd runtime (bound read-only, first on PATH) answers the replayed finds
    exactly as recorded (one file, none, two in fd's order) and the continued Pi's own find, both in bwrap."""
    if fd_runtime.find_fd() is None:
        pytest.skip("forkpoint's fd runtime is not installed (forkpoint agents install pi@0.83.0)")
    case = SandboxCase("pi", OPTIONAL, "events.jsonl", "", "")
    workspace = case.workspace_elsewhere(tmp_path)
    script = json.loads((OPTIONAL / "script.json").read_text())
    model = ScriptedModel([*script["turns"][:3], [tool_use("find", {"pattern": "*.json"}, "call_live_find")],
                           [text("Done.")]], seed=script["seed"], model="scripted-model")
    with model.serve() as url:
        result = case.run(tmp_path, workspace, upstream="openai-chat", upstream_url=f"{url}/v1", after_step=3)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    out = Path(result.output_dir or "")
    rows = json.loads((out / "observations.json").read_text())["observations"]
    finds = [row for row in rows if row["name"] == "find"]
    assert [row["id"] for row in finds] == ["call_opt_2", "call_opt_6", "call_opt_10"]
    assert all(row["exact"] for row in rows), rows
    events = [json.loads(line) for line in (out / "native" / "continued" / "events.jsonl").read_text().splitlines()]
    live = [r for e in events if e.get("type") == "turn_end" for r in e.get("toolResults") or []
            if r.get("toolCallId") == "call_live_find"]
    assert [(r["content"], r.get("isError")) for r in live] == [([{"type": "text", "text": "src/data.json"}], False)]
