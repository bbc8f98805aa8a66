"""Two runs, one workspace: real concurrent ``forkpoint replay`` processes on one workspace directory.

The first run blocks inside its replayed command (it waits for a file the test creates); a second run on the same
workspace — another run id, other state and output roots, and even another path to the directory — must be refused
at once (workspace_error, exit 20) naming the first run's id and pid, without running anything. A prepare-only run
needs no lock. Once the first run has finished, a third run succeeds. On a forkpoint without the workspace lock the
second run executes its command too (doubled effects) and blocks like the first.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

EXIT_WORKSPACE = 20


def _session(tmp: Path, workspace: Path) -> Path:
    started, release = tmp / "started", tmp / "release"
    command = (f"echo run >> marker.txt && touch {started} && "
               f"for i in $(seq 600); do [ -e {release} ] && break; sleep 0.05; done; echo done")
    builder = ClaudeSessionBuilder(cwd=str(workspace))
    builder.user_prompt("Do the task.")
    builder.assistant([text("step 1"), tool_use("toolu_0001", "Bash", {"command": command})])
    builder.results({"toolu_0001": "done\n"})
    builder.assistant([text("Done.")])
    return builder.write(tmp / "session.jsonl")


def _env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "FORKPOINT_LOCK_DIR": str(tmp / "locks")}


def _argv(session: Path, workspace: Path, root: Path, run_id: str, *mode: str) -> list[str]:
    return [sys.executable, "-m", "forkpoint.cli", "replay", "--agent", "claude-code", "--trajectory", str(session),
            "--after-step", "1", *(mode or ("--replay-only",)), "--workspace", str(workspace), "--state-dir",
            str(root / "state"), "--output-dir", str(root / "out"), "--run-id", run_id, "--json"]


def test_a_second_run_in_a_busy_workspace_is_refused_naming_the_first(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (tmp_path / "alias").symlink_to(workspace)
    session = _session(tmp_path, workspace)
    marker = workspace / "marker.txt"
    env = _env(tmp_path)
    first = subprocess.Popen(_argv(session, workspace, tmp_path / "a", "run-a"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "started").exists():
            assert first.poll() is None, first.communicate()
            assert time.monotonic() < deadline, "the first run never started its command"
            time.sleep(0.05)

        second = subprocess.run(_argv(session, tmp_path / "alias", tmp_path / "b", "run-b"), capture_output=True,
                                text=True, timeout=30, check=False, env=env)
        result = json.loads(second.stdout)
        assert second.returncode == EXIT_WORKSPACE, (second.returncode, result)
        assert result["failure"]["category"] == "workspace_error" and result["phase"] is None
        message = result["failure"]["message"]
        assert f"is in use by forkpoint run 'run-a' (pid {first.pid}, since " in message, message
        assert marker.read_text() == "run\n"  # the refused run executed nothing
        assert not (tmp_path / "b" / "out" / "run-b").exists()  # and consumed no output dir

        prepared = subprocess.run(_argv(session, workspace, tmp_path / "p", "run-p", "--prepare-only"),
                                  capture_output=True, text=True, timeout=30, check=False, env=env)
        assert prepared.returncode == 0, prepared.stdout  # prepare-only runs nothing: no lock needed
    finally:
        (tmp_path / "release").touch()
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, (out, err)
    assert json.loads(out)["phase"] == "replayed"

    third = subprocess.run(_argv(session, workspace, tmp_path / "c", "run-c"), capture_output=True, text=True,
                           timeout=60, check=False, env=env)
    assert third.returncode == 0, third.stdout
    assert marker.read_text() == "run\nrun\n"
    assert list((tmp_path / "locks").iterdir()) == []  # every holder removed its lock file
