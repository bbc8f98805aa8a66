"""End to end with the REAL claude binaries and the REAL bwrap, the workspace NOT at the recorded path.

- ``--sandbox bwrap``: recorded sessions replay and continue with the workspace mounted at the recorded cwd;
  observations are exact, and the live claude's own next action (a Read of a recorded absolute path) works.
- Tool replay has no network (a replayed socket connect to a host loopback listener is refused), while the
  continuation inside the same sandbox still reaches the bridge on the host's 127.0.0.1.
- ``--path-map``: replay + continue in the local sandbox, observations exact, rewrites in the metadata.
- Agent homes (HOME, XDG_*, CLAUDE_CONFIG_DIR) live under the state dir: the user's real home is untouched.
- The workspace inventory hash is recorded before replay and tells a reused workspace from a fresh one.
"""

from __future__ import annotations

import json
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from forkpoint import runtimes
from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.core.results import ReplayResult
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing import ScriptedModel
from forkpoint.workspace import inventory

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures" / "claude_code"
VERSIONS = ("2.1.220", "2.1.332")
SCENARIOS = ("single_bash", "parallel", "file_tools", "cd_persist", "error_result", "large_output")
NEEDS_BWRAP = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")


def _require_runtime(version: str) -> None:
    if runtimes.find("claude-code", version) is None:
        pytest.skip(f"claude-code {version} is not installed (forkpoint agents install claude-code@{version})")


def elsewhere(fixture: Path, tmp_path: Path) -> Path:
    """The recording's initial workspace, restored somewhere that is NOT the recorded path."""
    workspace = tmp_path / "not-the-recorded-path" / "ws"
    shutil.copytree(fixture / "workspace-initial", workspace)
    return workspace


def run(trajectory: Path, workspace: Path, tmp_path: Path, after: int, **overrides: Any) -> ReplayResult:
    values: dict[str, Any] = {
        "agent": "claude-code",
        "trajectory": str(trajectory),
        "after_step": after,
        "workspace": str(workspace),
        "state_dir": str(tmp_path / "state"),
        "output_dir": str(tmp_path / "out"),
        "run_id": f"run-{after}",
    }
    values.update(overrides)
    return execute(build_request(values, source="test"))


def observations(result: ReplayResult) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((Path(result.output_dir or "") / "observations.json").read_text())[
        "observations"]
    return rows


@pytest.fixture()
def upstream_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted-upstream-key")
    yield


def _cases() -> list[tuple[str, str, int]]:
    cases = []
    for version in VERSIONS:
        for scenario in SCENARIOS:
            session = FIXTURES / version / scenario / "session.jsonl"
            cases.append((version, scenario, parse_session(session).complete_count))
    return cases


@NEEDS_BWRAP
@pytest.mark.parametrize(("version", "scenario", "after"), _cases(), ids=lambda v: str(v))
def test_bwrap_replay_and_continue_with_the_workspace_elsewhere(
    version: str, scenario: str, after: int, tmp_path: Path, upstream_key: None
) -> None:
    _require_runtime(version)
    fixture = FIXTURES / version / scenario
    workspace = elsewhere(fixture, tmp_path)
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture / "session.jsonl", workspace, tmp_path, after, sandbox="bwrap", upstream="anthropic",
                     upstream_url=url)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    assert all(row["exact"] for row in observations(result)), observations(result)
    sandbox = result.metadata["sandbox"]
    assert sandbox["name"] == "bwrap" and sandbox["agent_cwd"] == f"/tmp/forkpoint-rec/{scenario}"
    assert result.metadata["path_rewrites"] == []
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0
    out = Path(result.output_dir or "")
    next_action = json.loads((out / "next-action.json").read_text())
    assert next_action["metrics"]["same_tool_calls"] is True, next_action
    # The live claude ran at the recorded path (in the directory the replayed shell ended in: cd_persist's `sub`):
    # its session sits in that project folder of the isolated home.
    home = tmp_path / "state" / f"run-{after}" / "agent-home"
    shell = "-sub" if scenario == "cd_persist" else ""
    assert result.metadata["shell_cwd"]["restored"] is True
    assert result.metadata["shell_cwd"]["replayed"] == ("sub" if shell else ".")
    assert list((home / ".claude" / "projects").iterdir()) == [
        home / ".claude" / "projects" / f"-tmp-forkpoint-rec-{scenario.replace('_', '-')}{shell}"]


@NEEDS_BWRAP
def test_the_live_agent_reads_recorded_paths_inside_the_sandbox(tmp_path: Path, upstream_key: None) -> None:
    """single_bash after batch 1: the scripted next action is claude's own Read of /tmp/forkpoint-rec/... ."""
    _require_runtime("2.1.332")
    fixture = FIXTURES / "2.1.332" / "single_bash"
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture / "session.jsonl", elsewhere(fixture, tmp_path), tmp_path, 1, sandbox="bwrap",
                     upstream="anthropic", upstream_url=url)
    assert result.failure is None, result.failure
    continued = next((Path(result.output_dir or "") / "native" / "continued").glob("*.jsonl")).read_text()
    results = [block for line in continued.splitlines() for block in _tool_results(orjson.loads(line))]
    assert results and results[-1]["content"] == "1\thello from notes\n2\tsecond line\n3\t"
    assert results[-1].get("is_error") in (None, False)


def _tool_results(line: dict[str, Any]) -> list[dict[str, Any]]:
    content = line.get("message", {}).get("content") if line.get("type") == "user" else None
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"] if isinstance(
        content, list) else []


@pytest.fixture()
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def _connecting_session(tmp_path: Path, port: int) -> Path:
    """single_bash with its first Bash command replaced by a connect to a loopback listener on the host."""
    source = FIXTURES / "2.1.332" / "single_bash" / "session.jsonl"
    command = (f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); "
               "print('connected')\"")
    lines = []
    for raw in source.read_bytes().splitlines():
        line = orjson.loads(raw)
        content = line.get("message", {}).get("content")
        if line.get("type") == "assistant" and isinstance(content, list) and content[0].get("type") == "tool_use" \
                and content[0]["input"].get("command") == "ls":
            content[0]["input"]["command"] = command
            raw = orjson.dumps(line)
        lines.append(raw)
    target = tmp_path / "connect.jsonl"
    target.write_bytes(b"\n".join(lines) + b"\n")
    return target


@NEEDS_BWRAP
def test_no_network_during_replay_but_the_continuation_reaches_the_bridge(tmp_path: Path, listener: int) -> None:
    _require_runtime("2.1.332")
    fixture = FIXTURES / "2.1.332" / "single_bash"
    session = _connecting_session(tmp_path, listener)
    result = run(session, elsewhere(fixture, tmp_path / "bwrap"), tmp_path / "bwrap", 1, sandbox="bwrap",
                 upstream="stub")
    assert result.failure is None, result.failure
    assert result.phase == "continued" and result.metadata["model_bridge"]["validated"] >= 1
    refused = _prefix_results(result)[-1]
    assert refused["is_error"] is True and "ConnectionRefusedError" in refused["content"], refused
    # Control: the same call in the local sandbox (no isolation) does connect.
    local = run(session, elsewhere(fixture, tmp_path / "local"), tmp_path / "local", 1, replay_only=True,
                path_map=[f"/tmp/forkpoint-rec/single_bash={(tmp_path / 'local' / 'not-the-recorded-path' / 'ws')}"])
    assert local.failure is None, local.failure
    assert _prefix_results(local)[-1]["content"] == "connected"


@NEEDS_BWRAP
def test_the_continued_agent_reaches_only_the_bridge(tmp_path: Path, listener: int, upstream_key: None) -> None:
    """The live claude's own Bash call connects to a host loopback listener: refused (its network namespace has
    only the bridge's port, relayed), while its model requests reach the bridge and the continuation completes."""
    _require_runtime("2.1.332")
    from forkpoint.testing.claude_sessions import text
    from forkpoint.testing.scripted_model import tool_use

    fixture = FIXTURES / "2.1.332" / "single_bash"
    command = (f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {listener}), timeout=5); "
               "print('connected')\"")
    model = ScriptedModel([[text("(recorded)")], [tool_use("Bash", {"command": command})], [text("Done.")]])
    with model.serve() as url:
        result = run(fixture / "session.jsonl", elsewhere(fixture, tmp_path), tmp_path, 1, sandbox="bwrap",
                     upstream="anthropic", upstream_url=url)
    assert result.failure is None, result.failure
    assert result.phase == "continued" and result.agent_status == "completed"
    assert result.metadata["model_bridge"]["validated"] >= 2  # the request after the tool call came through too
    continued = next((Path(result.output_dir or "") / "native" / "continued").glob("*.jsonl")).read_text()
    live = [block for line in continued.splitlines() for block in _tool_results(orjson.loads(line))][-1]
    assert "ConnectionRefusedError" in str(live["content"]) and "connected" not in str(live["content"]), live
    assert result.metadata["sandbox"]["network_during_continuation"].startswith("only the bridge")


def _prefix_results(result: ReplayResult) -> list[dict[str, Any]]:
    prefix = Path(next(a.path for a in result.artifacts if a.role == "native_prefix"))
    return [block for raw in prefix.read_bytes().splitlines() for block in _tool_results(orjson.loads(raw))]


@pytest.mark.parametrize("version", VERSIONS)
def test_path_map_replay_and_continue(version: str, tmp_path: Path, upstream_key: None) -> None:
    _require_runtime(version)
    fixture = FIXTURES / version / "file_tools"
    workspace = elsewhere(fixture, tmp_path)
    after = parse_session(fixture / "session.jsonl").complete_count
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture / "session.jsonl", workspace, tmp_path, after, upstream="anthropic", upstream_url=url,
                     path_map=[f"/tmp/forkpoint-rec/file_tools={workspace}"])
    assert result.failure is None, result.failure
    assert all(row["exact"] for row in observations(result))
    rewrites = result.metadata["path_rewrites"]
    assert len(rewrites) == 4 and {row["field"] for row in rewrites} == {"file_path"}
    assert result.metadata["sandbox"]["path_map"] == [{"recorded": "/tmp/forkpoint-rec/file_tools",
                                                       "real": str(workspace)}]
    # The native prefix keeps the model's original text: recorded paths, never the workspace path.
    prefix = Path(next(a.path for a in result.artifacts if a.role == "native_prefix")).read_text()
    assert str(workspace) not in prefix and "/tmp/forkpoint-rec/file_tools/new.txt" in prefix
    assert (workspace / "new.txt").read_text() == "line one\nline 2\n"


@pytest.mark.parametrize("sandbox", ["local", "bwrap"])
def test_agent_homes_never_touch_the_real_home(sandbox: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if sandbox == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    _require_runtime("2.1.332")
    installed = runtimes.find("claude-code", "2.1.332")  # found through the real home's cache: before we move it
    assert installed is not None
    real_home = tmp_path / "real-home"
    real_home.mkdir()
    for name, relative in (("HOME", ""), ("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"),
                           ("XDG_CACHE_HOME", ".cache"), ("XDG_STATE_HOME", ".local/state")):
        monkeypatch.setenv(name, str(real_home / relative))
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(real_home / ".claude"))
    fixture = FIXTURES / "2.1.332" / "single_bash"
    workspace = elsewhere(fixture, tmp_path)
    extra: dict[str, Any] = {"sandbox": sandbox} if sandbox == "bwrap" else {
        "path_map": [f"/tmp/forkpoint-rec/single_bash={workspace}"]}
    result = run(fixture / "session.jsonl", workspace, tmp_path, 2, upstream="stub",
                 agent_entrypoint=str(installed.entrypoint), **extra)
    assert result.failure is None, result.failure
    assert list(real_home.iterdir()) == []
    home = tmp_path / "state" / "run-2" / "agent-home"
    assert any((home / ".claude" / "projects").glob("*/*.jsonl"))
    assert Path(result.state_dir or "") in home.parents


def test_inventory_is_recorded_and_detects_a_reused_workspace(tmp_path: Path) -> None:
    fixture = FIXTURES / "2.1.332" / "file_tools"
    workspace = elsewhere(fixture, tmp_path)
    fresh = inventory(workspace)
    mapping = [f"/tmp/forkpoint-rec/file_tools={workspace}"]
    first = run(fixture / "session.jsonl", workspace, tmp_path, 4, replay_only=True, path_map=mapping)
    assert first.failure is None, first.failure
    assert first.metadata["workspace_inventory_sha256"] == fresh.sha256
    assert first.metadata["workspace_inventory_files"] == fresh.files == 1
    events = (Path(first.output_dir or "") / "replay-events.jsonl").read_text()
    assert fresh.sha256 in events
    # The first replay wrote new.txt: replaying again in the same directory is visibly not fresh.
    again = run(fixture / "session.jsonl", workspace, tmp_path, 4, replay_only=True, path_map=mapping,
                run_id="again")
    assert again.metadata["workspace_inventory_sha256"] != first.metadata["workspace_inventory_sha256"]
    assert again.metadata["workspace_inventory_files"] == 2
    assert not all(row["exact"] for row in observations(again))  # and its observations show it
