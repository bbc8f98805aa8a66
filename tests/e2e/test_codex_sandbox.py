"""End to end with the REAL codex binaries and the REAL bwrap, the workspace NOT at the recorded path.

``--sandbox bwrap --upstream stub``: the recorded rollout replays with the workspace mounted at the recorded cwd
(observations exact, nothing rewritten), and ``codex exec resume`` runs in the same sandbox (its own network
namespace with only the bridge's port relayed into it; its CODEX_HOME under the state dir writable; the runtime
readable).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.codex.parse import parse_rollout
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures" / "codex"
VERSIONS = ("0.149.0", "0.171.0")


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
@pytest.mark.parametrize("version", VERSIONS)
def test_bwrap_replay_and_continue_with_the_workspace_elsewhere(version: str, tmp_path: Path) -> None:
    if runtimes.find("codex", version) is None:
        pytest.skip(f"codex {version} is not installed (forkpoint agents install codex@{version})")
    fixture = FIXTURES / version / "exec_basic"
    recorded_cwd = json.loads((fixture / "meta.json").read_text())["cwd"]
    workspace = tmp_path / "not-the-recorded-path" / "ws"
    shutil.copytree(fixture / "workspace-initial", workspace)
    after = parse_rollout(fixture / "rollout.jsonl").complete_count
    values: dict[str, Any] = {
        "agent": "codex",
        "trajectory": str(fixture / "rollout.jsonl"),
        "after_step": after,
        "workspace": str(workspace),
        "state_dir": str(tmp_path / "state"),
        "output_dir": str(tmp_path / "out"),
        "run_id": "run",
        "sandbox": "bwrap",
        "upstream": "stub",
    }
    result = execute(build_request(values, source="test"))
    assert result.failure is None, result.failure
    assert result.phase == "continued"
    out = Path(result.output_dir or "")
    observations = json.loads((out / "observations.json").read_text())["observations"]
    assert observations and all(row["exact"] for row in observations), observations
    sandbox = result.metadata["sandbox"]
    assert sandbox["name"] == "bwrap" and sandbox["agent_cwd"] == recorded_cwd
    assert result.metadata["path_rewrites"] == []
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0
    continued = next((out / "native" / "continued").glob("rollout-*.jsonl"))
    assert "__forkpoint_nonce_" not in continued.read_text()
    # codex wrote its session into the isolated CODEX_HOME under the state dir.
    codex_home = tmp_path / "state" / "run" / "agent-home" / ".codex"
    assert any((codex_home / "sessions").rglob("rollout-*.jsonl"))


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_the_continued_codex_reaches_only_the_bridge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The live codex's own exec_command connects to a host loopback listener: refused (only the bridge's port is
    relayed into its network namespace), while the continuation completes through the bridge."""
    import socket

    from forkpoint.testing import ScriptedModel
    from forkpoint.testing.claude_sessions import text, tool_use

    if runtimes.find("codex", "0.171.0") is None:
        pytest.skip("codex 0.171.0 is not installed")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    fixture = FIXTURES / "0.171.0" / "exec_basic"
    workspace = tmp_path / "not-the-recorded-path" / "ws"
    shutil.copytree(fixture / "workspace-initial", workspace)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    connect = (f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); "
               "print('connected')\"")
    model = ScriptedModel([[text("(recorded)")], [tool_use("call_net", "exec_command", {"cmd": connect})],
                           [text("Done.")]])
    try:
        with model.serve() as url:
            result = execute(build_request({
                "agent": "codex", "trajectory": str(fixture / "rollout.jsonl"), "after_step": 1,
                "workspace": str(workspace), "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
                "run_id": "run", "sandbox": "bwrap", "upstream": "openai-responses", "upstream_url": f"{url}/v1"},
                source="test"))
        assert result.failure is None, result.failure
        assert result.phase == "continued" and result.metadata["model_bridge"]["validated"] >= 2
        try:
            listener.accept()[0].close()
            reached = True
        except BlockingIOError:
            reached = False
        assert not reached, "the continued codex reached a host loopback listener"
        continued = next((Path(result.output_dir or "") / "native" / "continued").glob("rollout-*.jsonl")).read_text()
        assert "ConnectionRefusedError" in continued
    finally:
        listener.close()
