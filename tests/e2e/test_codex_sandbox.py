"""End to end with the REAL codex binaries and the REAL bwrap, the workspace NOT at the recorded path.

``--sandbox bwrap --upstream stub``: the recorded rollout replays with the workspace mounted at the recorded cwd
(observations exact, nothing rewritten), and ``codex exec resume`` runs in the same sandbox (network shared, so it
reaches the bridge on the host's 127.0.0.1; CODEX_HOME under the state dir writable; the runtime readable).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.codex.parse import parse_rollout
from forkpoint.engine import execute
from forkpoint.request import build_request

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
