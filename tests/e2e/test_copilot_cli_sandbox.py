"""End to end with the REAL GitHub Copilot CLI 1.0.102 and the REAL bwrap, the workspace NOT at the recorded path.

``--sandbox bwrap``: each replayed call's ``copilot -p`` (answering forkpoint's loopback tool host) runs in the
sandbox with the workspace mounted at the recorded cwd and no network but the host's port; the continued
``copilot --resume`` runs there too, reaching only the bridge. The held-out checks (``forkpoint.testing.probes``)
run a probe script as a replayed ``bash`` call and as the live CLI's own ``bash`` call, and look at the effects on
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
from forkpoint.testing.probes import PROBE_COMMAND, PROBE_FILE, HostProbes
from forkpoint.testing.recordings import recorded_cwd
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")]

VERSION = "1.0.102"
FIXTURE = Path(__file__).parents[1] / "fixtures" / "copilot_cli" / VERSION / "tools"
#: the first recorded call's command, as session.jsonl spells it
RECORDED_COMMAND = '"command":"ls; echo todo > notes.txt; cat notes.txt"'


@pytest.fixture(autouse=True)
def _runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("copilot-cli", VERSION) is None:
        pytest.skip(f"copilot-cli {VERSION} is not installed (forkpoint agents install copilot-cli@{VERSION})")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")


def workspace_elsewhere(tmp_path: Path) -> Path:
    workspace = tmp_path / "not-the-recorded-path" / "ws"
    shutil.copytree(FIXTURE / "workspace-initial", workspace)
    return workspace


def run(tmp_path: Path, workspace: Path, trajectory: Path, **overrides: Any) -> ReplayResult:
    values: dict[str, Any] = {"agent": "copilot-cli", "trajectory": str(trajectory), "workspace": str(workspace),
                              "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
                              "run_id": "run", "sandbox": "bwrap", **overrides}
    return execute(build_request(values, source="test"))


def test_a_replayed_command_cannot_get_out(tmp_path: Path) -> None:
    """Held-out checks on a replayed bash call: no write outside the workspace (nor at its host path), no HOME
    canary, no host listener on loopback or the host's own address, nothing left running."""
    workspace = workspace_elsewhere(tmp_path)
    with HostProbes(tmp_path / "outside") as probes:
        (workspace / PROBE_FILE).write_text(probes.script(workspace))
        source = (FIXTURE / "session.jsonl").read_text()
        assert RECORDED_COMMAND in source
        trajectory = tmp_path / "probing-session.jsonl"
        trajectory.write_text(source.replace(RECORDED_COMMAND, f'"command":"{PROBE_COMMAND}"'))
        result = run(tmp_path, workspace, trajectory, after_step=1, replay_only=True)
        assert result.failure is None, result.failure
        assert result.metadata["sandbox"]["agent_cwd"] == str(recorded_cwd(FIXTURE))
        rows = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
        fresh = json.dumps([row["fresh_preview"] for row in rows])
        assert "probed" in fresh and "canary-hidden" in fresh and "loopback-unreachable" in fresh, fresh
        assert "outside-refused" in fresh and "host-path-refused" in fresh, fresh
        assert probes.address is None or "address-unreachable" in fresh, fresh
        assert probes.escapes(fresh) == []


def test_the_continued_copilot_cli_reaches_only_the_bridge(tmp_path: Path) -> None:
    """Batch 1 replays in bwrap at the recorded cwd (exact); the live CLI's own bash runs the probe: contained like
    a replayed call, while the continuation completes through the bridge (its only reachable port)."""
    workspace = workspace_elsewhere(tmp_path)
    with HostProbes(tmp_path / "outside") as probes:
        (workspace / PROBE_FILE).write_text(probes.script(workspace))
        model = ScriptedModel([[tool_use("bash", {"command": PROBE_COMMAND, "description": "probe"})],
                               [text("Done.")]], step_mode="counter", model="gpt-4.1", seed="copilot-probe")
        with model.serve() as url:
            result = run(tmp_path, workspace, FIXTURE / "session.jsonl", after_step=1, upstream="openai-chat",
                         upstream_url=url + "/v1")
        assert result.failure is None, result.failure
        assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
        assert result.metadata["model_bridge"]["validated"] == 2
        assert (workspace / "notes.txt").read_text() == "todo\n"  # the replayed bash wrote it, at the host path
        seen = json.dumps(model.requests[1]["body"]["messages"][-1])
        assert "probed" in seen and "loopback-unreachable" in seen and "canary-hidden" in seen, seen
        assert "outside-refused" in seen and (probes.address is None or "address-unreachable" in seen), seen
        assert probes.escapes(seen) == []
