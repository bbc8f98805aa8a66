"""End to end with the REAL OpenHands SDK 1.58.2 and the REAL bwrap, the workspace NOT at the recorded path: the
runner (and the SDK's tmux terminal) sees the workspace at the recorded cwd for the replay (no network) and the
continuation (its own network namespace with only the bridge's port relayed in). One boundary each: the SDK is
slow to start."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing import ScriptedModel

pytestmark = [pytest.mark.e2e, pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is missing")]

VERSION = "1.58.2"
FIXTURE = Path(__file__).parents[1] / "fixtures" / "openhands-sdk" / VERSION / "basic"


@pytest.fixture(autouse=True)
def _runtime() -> None:
    if runtimes.find("openhands-sdk", VERSION) is None:
        pytest.skip(f"openhands-sdk {VERSION} is not installed (forkpoint agents install openhands-sdk@{VERSION})")


def test_bwrap_replay_and_continue_with_the_workspace_elsewhere(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Replay batches 1..2, continue the SDK to the end; its first live step is a terminal command running the
    held-out checks: the continued SDK is contained like a replayed call (only the bridge's port reachable)."""
    from forkpoint.testing.held_out import HeldOut

    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    recorded = json.loads((FIXTURE / "meta.json").read_text())["cwd"]
    workspace = tmp_path / "elsewhere" / "ws"
    workspace.mkdir(parents=True)  # the recording started in an empty workspace
    script = json.loads((FIXTURE / "script.json").read_text())
    with HeldOut(tmp_path) as bait:
        live = {"type": "tool_use", "name": "terminal",
                "input": {"command": "; ".join(bait.commands()), "security_risk": "LOW"}}
        script["turns"].insert(2, {"content": [live]})
        (tmp_path / "script.json").write_text(json.dumps(script))
        model = ScriptedModel.from_file(tmp_path / "script.json", model="scripted")
        with model.serve() as url:
            result = execute(build_request({
                "agent": "openhands-sdk", "trajectory": str(FIXTURE / "conversation" / "base_state.json"),
                "after_step": 2, "workspace": str(workspace), "state_dir": str(tmp_path / "state"),
                "output_dir": str(tmp_path / "out"), "run_id": "run", "sandbox": "bwrap",
                "upstream": "openai-chat", "upstream_url": f"{url}/v1"}, source="test"))
        assert result.failure is None, result.failure
        continued = next((Path(result.output_dir or "") / "native" / "continued").glob("*.json")).read_text()
        # the live command really ran (each check printed its refusal)
        assert "started" in continued and "canary-hidden" in continued and "outside-refused" in continued
        assert bait.violations([continued]) == []
    assert (result.phase, result.agent_status) == ("continued", "completed")
    rows = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
    assert len(rows) == 2 and rows[1]["exact"], rows  # the file editor's view, at the recorded path
    # the terminal's: exact, but for the SDK's ``which python`` footer when the recording's python lived in a
    # folder bwrap hides (the host HOME, e.g. pyenv): the sandbox's PATH finds none there
    changed = [] if rows[0]["exact"] else [line for line in rows[0]["diff"]["lines"][3:] if line[:1] in "+-"]
    assert all(line.startswith(f"-[Python interpreter: {Path.home()}/") for line in changed), rows[0]
    assert result.metadata["sandbox"]["agent_cwd"] == recorded
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0
    # the continued SDK edited the file at the recorded path inside the sandbox: the host workspace changed
    assert (workspace / "pkg" / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


def test_the_held_out_checks_through_the_sdk_terminal(tmp_path: Path) -> None:
    """A recorded terminal command replayed by the SDK's own TerminalTool (tmux) under bwrap: no write outside the
    workspace, no canary read in the host HOME, no non-loopback connect, no process left behind."""
    from forkpoint.testing.held_out import HeldOut

    shared = Path(f"/tmp/tmux-{os.getuid()}")  # the tmux socket stays in the sandbox's own /tmp

    def sdk_sockets() -> set[Path]:
        return {p for p in shared.iterdir() if "openhands" in p.name} if shared.is_dir() else set()

    before = sdk_sockets()
    workspace = tmp_path / "elsewhere" / "ws"
    workspace.mkdir(parents=True)
    conversation = tmp_path / "conversation"
    shutil.copytree(FIXTURE / "conversation", conversation)
    with HeldOut(tmp_path) as bait:
        command = "; ".join(bait.commands())
        (first,) = [path for path in (conversation / "events").glob("event-00002-*.json")]
        event = json.loads(first.read_text())
        event["action"]["command"] = command
        arguments = json.loads(event["tool_call"]["arguments"])
        arguments["command"] = command
        event["tool_call"]["arguments"] = json.dumps(arguments)
        first.write_text(json.dumps(event))
        result = execute(build_request({
            "agent": "openhands-sdk", "trajectory": str(conversation / "base_state.json"), "after_step": 1,
            "workspace": str(workspace), "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
            "run_id": "run", "sandbox": "bwrap", "replay_only": True}, source="test"))
        assert result.failure is None, result.failure
        fresh = next((Path(result.output_dir or "") / "native" / "prefix").glob("*.json")).read_text()
        # the hostile command really ran, through the terminal (each check printed its refusal)
        assert "started" in fresh and "canary-hidden" in fresh and "outside-refused" in fresh
        assert bait.violations([fresh]) == []
    assert sdk_sockets() == before
