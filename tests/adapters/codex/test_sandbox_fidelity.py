"""Codex fixture fidelity with the workspace ELSEWHERE: fresh == recorded through --sandbox bwrap and --path-map.

Same proof as test_fixture_fidelity (every FRESH call of every recorded fixture, content byte for byte after
``normalize_volatile``), but the workspace lives in a temporary directory, not at the recorded cwd
(/tmp/forkpoint-rec-codex/<scenario>):

- bwrap: the workspace is mounted at the recorded cwd, so recorded absolute paths (exec workdirs, apply_patch
  paths) resolve unchanged and nothing is rewritten;
- path-map (local): ``RECORDED=WORKSPACE``; every call whose input names the recorded cwd is rewritten (logged),
  and outputs naming the workspace are mapped back (docs/sandboxes.md).
"""

from __future__ import annotations

import json
import shutil
import socket
from pathlib import Path

import pytest

from forkpoint.adapters.codex.parse import parse_rollout
from forkpoint.adapters.codex.tools import PROFILES, CodexToolExecutor, normalize_volatile
from forkpoint.adapters.versions import nearest
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import CallPolicy, RunContext, ToolCall
from forkpoint.sandbox import open_sandbox

FIXTURES = Path(__file__).parents[2] / "fixtures" / "codex"
ROLLOUTS = sorted(FIXTURES.glob("0.*/*/rollout.jsonl"))
MODES = ["bwrap", "path_map"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rollout", ROLLOUTS, ids=lambda r: f"{r.parent.parent.name}-{r.parent.name}")
def test_fresh_equals_recorded_with_the_workspace_elsewhere(rollout: Path, mode: str, tmp_path: Path) -> None:
    if mode == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (.ci/run installs it)")
    recorded_cwd = json.loads((rollout.parent / "meta.json").read_text("utf-8"))["cwd"]
    trajectory = parse_rollout(rollout)
    assert trajectory.cwd == recorded_cwd and trajectory.version
    workspace = tmp_path / "somewhere" / "else" / "ws"
    shutil.copytree(rollout.parent / "workspace-initial", workspace, symlinks=True)
    path_map = [f"{recorded_cwd}={workspace}"] if mode == "path_map" else []
    sandbox = open_sandbox("local" if mode == "path_map" else "bwrap", workspace, recorded_cwd, path_map)
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out", trajectory.session_id, sandbox=sandbox)
    # a release that is not verified (0.40.0) is read as its nearest verified version (forkpoint.adapters.versions)
    tool_version = trajectory.version if trajectory.version in PROFILES else nearest(list(PROFILES),
                                                                                       trajectory.version)
    executor = CodexToolExecutor(context, tool_version, native=trajectory.native)
    calls = [call for batch in trajectory.batches[: trajectory.complete_count] for call in batch.calls
             if call.policy is CallPolicy.FRESH]
    assert calls
    try:
        for call in calls:
            if rollout.parent.name == "view_image" and call.arguments.get("path") == "big.png":  # Codex re-encodes
                # (0.40 sends it unchanged: view_image_040 re-runs it)
                with pytest.raises(ReplayError):
                    executor.run(call)
                continue
            fresh = executor.run(call)
            assert call.historical is not None
            assert normalize_volatile(fresh.content) == normalize_volatile(call.historical.content), call.call_id
            assert fresh.is_error == call.historical.is_error, call.call_id
            assert str(workspace) not in json.dumps(fresh.native) or mode == "bwrap", call.call_id
    finally:
        executor.close()
    # Every call whose input names the recorded cwd was rewritten (path-map), and only then; bwrap rewrites nothing.
    naming = {call.call_id for call in calls if recorded_cwd in json.dumps(call.arguments)}
    assert {row["call_id"] for row in sandbox.path_rewrites} == (naming if mode == "path_map" else set())
    assert all(row["count"] >= 1 for row in sandbox.path_rewrites)


RECORDED = "/tmp/forkpoint-rec-codex/sandboxed-paths"


def _exec(call_id: str, cmd: str, **extra: object) -> ToolCall:
    return ToolCall(call_id, "exec_command", {"cmd": cmd, **extra}, None)


@pytest.mark.parametrize("mode", MODES)
def test_recorded_absolute_paths_work_and_print_as_recorded(mode: str, tmp_path: Path) -> None:
    """Recorded absolute paths in workdir, cmd and apply_patch resolve to the workspace; outputs name the recorded
    cwd (bwrap: seen there; path-map: mapped back), and replayed commands have no network under bwrap."""
    if mode == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (.ci/run installs it)")
    workspace = tmp_path / "elsewhere" / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "notes.txt").write_text("hello\n")
    path_map = [f"{RECORDED}={workspace}"] if mode == "path_map" else []
    sandbox = open_sandbox("local" if mode == "path_map" else "bwrap", workspace, RECORDED, path_map)
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out", "0000", sandbox=sandbox)
    executor = CodexToolExecutor(context, "0.171.0")
    patch = f"*** Begin Patch\n*** Add File: {RECORDED}/sub/new.txt\n+made\n*** End Patch\n"
    try:
        pwd = executor.run(_exec("c1", f"pwd; cat {RECORDED}/notes.txt", workdir=f"{RECORDED}/sub"))
        relative = executor.run(_exec("c2", "pwd -P", workdir="sub"))
        patched = executor.run(ToolCall("c3", "apply_patch", {"input": patch}, None))
        missing = executor.run(_exec("c4", "true", workdir=f"{RECORDED}/absent"))
    finally:
        executor.close()
    assert pwd.content.endswith(f"Output:\n{RECORDED}/sub\nhello\n"), pwd.content
    assert relative.content.endswith(f"Output:\n{RECORDED}/sub\n"), relative.content
    assert patched.content.endswith(f"Output:\nSuccess. Updated the following files:\nA {RECORDED}/sub/new.txt\n")
    assert patched.native == {"changed_paths": [f"{RECORDED}/sub/new.txt"]}
    assert (workspace / "sub" / "new.txt").read_text() == "made\n"
    assert "No such file or directory" in missing.content and str(workspace) not in missing.content
    rewritten = {row["call_id"] for row in sandbox.path_rewrites}
    assert rewritten == ({"c1", "c3", "c4"} if mode == "path_map" else set())


def test_no_network_for_replayed_commands_under_bwrap(tmp_path: Path) -> None:
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed (.ci/run installs it)")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    connect = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5); print('ok')\""
    try:
        for name in ("local", "bwrap"):
            sandbox = open_sandbox(name, workspace, str(workspace) if name == "local" else RECORDED)
            context = RunContext(workspace, tmp_path / name, tmp_path / "out", "0000", sandbox=sandbox)
            executor = CodexToolExecutor(context, "0.171.0")
            try:
                fresh = executor.run(_exec("c1", connect))
            finally:
                executor.close()
            if name == "local":
                assert fresh.content.endswith("Output:\nok\n"), fresh.content
            else:
                assert "ConnectionRefusedError" in fresh.content, fresh.content
    finally:
        server.close()
