"""Claude Code MCP tools (fixture ``mcp_tools``: real 2.1.220 / 2.1.332 binaries with a real stdio server written with
the official SDK, ``forkpoint.testing.mcp_server``): stale by default with the server named, re-run exactly against the
user's server with ``--mcp-config``, reused per call with ``--reuse-observations``."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.core.model import CallPolicy
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude_code"
VERSIONS = ("2.1.220", "2.1.332")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")


def rows(out: Path) -> list[dict[str, Any]]:
    return list(json.loads((out / "observations.json").read_text())["observations"])


def _mcp_recording(tmp_path: Path) -> Path:
    """single_bash with its Read renamed to an MCP tool (no verified binary's fixture has an MCP server)."""
    source = FIXTURES / "2.1.332" / "single_bash" / "session.jsonl"
    path = tmp_path / "mcp.jsonl"
    path.write_text(source.read_text().replace('"name":"Read"', '"name":"mcp__docs__read"'))
    return path


def test_mcp_calls_are_stale_naming_the_server_and_reused_by_request(tmp_path: Path) -> None:
    session = _mcp_recording(tmp_path)
    workspace = tmp_path / "ws"
    shutil.copytree(FIXTURES / "2.1.332" / "single_bash" / "workspace-initial", workspace)
    base = {"agent": "claude-code", "trajectory": str(session), "after_step": 2, "replay_only": True,
            "workspace": str(workspace), "sandbox": "bwrap" if shutil.which("bwrap") else "local",
            "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"), "on_divergence": "ignore"}
    if base["sandbox"] == "local":
        pytest.skip("bwrap is not installed")
    refused = execute(build_request({**base, "run_id": "a"}, source="test")).to_json()
    assert refused["failure"] is not None and "MCP server 'docs'" in refused["failure"]["message"]
    reused = execute(build_request({**base, "run_id": "b", "reuse_observations": ["mcp__docs__*"]},
                                   source="test")).to_json()
    assert reused["failure"] is None
    assert "reused_by_request" in reused["quality_reasons"] and "stale_observations" not in reused["quality_reasons"]
    table = rows(tmp_path / "out" / "b")
    assert [(row["name"], row["reused"]) for row in table] == [("Bash", None), ("mcp__docs__read", "reused_by_request")]


def _mcp_config(tmp_path: Path) -> Path:
    """The recording's own server (forkpoint.testing.mcp_server, a real SDK server) as --mcp-config names it."""
    path = tmp_path / "mcp.json"
    src = str(Path(__file__).resolve().parents[3] / "src")
    path.write_text(json.dumps({"mcpServers": {"tiny": {
        "command": sys.executable, "args": ["-m", "forkpoint.testing.mcp_server"], "env": {"PYTHONPATH": src}}}}))
    return path


@needs_bwrap
@pytest.mark.parametrize("version", VERSIONS)
def test_mcp_calls_re_run_against_the_users_server_exactly(tmp_path: Path, version: str) -> None:
    """Fixture mcp_tools (a real server, both versions): structured, text-block and error results are reproduced
    byte for byte (2.1.332's deferred-schema hint included), and the server's effect lands in the workspace."""
    pytest.importorskip("mcp")
    fixture = FIXTURES / version / "mcp_tools"
    workspace = tmp_path / "ws"
    shutil.copytree(fixture / "workspace-initial", workspace)
    result = execute(build_request({
        "agent": "claude-code", "trajectory": str(fixture / "session.jsonl"), "after_step": 7, "replay_only": True,
        "workspace": str(workspace), "sandbox": "bwrap", "state_dir": str(tmp_path / "state"),
        "output_dir": str(tmp_path / "out"), "run_id": "m", "mcp_config": str(_mcp_config(tmp_path)),
        "mcp_timeout": 60}, source="test")).to_json()
    assert result["failure"] is None, result["failure"]
    assert (result["quality"], result["observations_match"]) == ("verified", "exact")
    table = rows(tmp_path / "out" / "m")
    assert [row["name"] for row in table][1:5] == ["mcp__tiny__echo", "mcp__tiny__plain", "mcp__tiny__two",
                                                   "mcp__tiny__count"]
    assert all(row["exact"] and not row["stale_reused"] for row in table)
    assert (workspace / "count.txt").read_text() == "first\n"


def test_mcp_calls_without_a_config_are_stale_naming_the_server() -> None:
    parsed = parse_session(FIXTURES / "2.1.332" / "mcp_tools" / "session.jsonl")
    mcp = [call for batch in parsed.batches for call in batch.calls if call.name.startswith("mcp__")]
    assert mcp and all(call.policy is CallPolicy.STALE and call.mcp == ("tiny", call.name.split("__")[2])
                       and "MCP server 'tiny'" in (call.policy_reason or "") for call in mcp)
