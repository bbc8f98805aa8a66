"""Claude's tools under --sandbox bwrap: Bash inside the sandbox, file tools on the recorded paths (real bwrap)."""

from __future__ import annotations

import os
import shutil
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor
from forkpoint.core.model import FreshObservation, RunContext, ToolCall
from forkpoint.sandbox import open_sandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")

RECORDED = "/tmp/forkpoint-rec/tools-under-bwrap"
SESSION = "11111111-2222-3333-4444-555555555555"


@pytest.fixture
def executor(tmp_path: Path) -> Iterator[ClaudeToolExecutor]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello\n")
    os.symlink(f"{RECORDED}/notes.txt", workspace / "absolute-link")  # recorded-path target: valid inside
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out",
                         sandbox=open_sandbox("bwrap", workspace, RECORDED))
    tools = ClaudeToolExecutor(context, "2.1.332", SESSION, tmp_path / "state" / "home" / ".claude")
    yield tools
    tools.close()


def call(executor: ClaudeToolExecutor, name: str, **arguments: Any) -> FreshObservation:
    return executor.run(ToolCall(f"call-{name}-{len(arguments)}", name, arguments, None))


def test_bash_sees_the_recorded_path_and_the_isolated_home(executor: ClaudeToolExecutor, tmp_path: Path) -> None:
    fresh = call(executor, "Bash", command='pwd; cat absolute-link; echo "$HOME"; echo "$XDG_CONFIG_HOME"; '
                                           "mkdir -p sub && cd sub")
    home = tmp_path / "state" / "home"
    assert fresh.content == f"{RECORDED}\nhello\n{home}\n{home}/.config"
    assert call(executor, "Bash", command="pwd").content == f"{RECORDED}/sub"  # the shell's cwd persists


def test_file_tools_resolve_recorded_paths(executor: ClaudeToolExecutor, tmp_path: Path) -> None:
    assert call(executor, "Read", file_path=f"{RECORDED}/notes.txt").content == "1\thello\n2\t"
    assert call(executor, "Read", file_path=f"{RECORDED}/absolute-link").content == "1\thello\n2\t"
    written = call(executor, "Write", file_path=f"{RECORDED}/out/new.txt", content="made\n")
    assert written.content.startswith(f"File created successfully at: {RECORDED}/out/new.txt")
    assert (tmp_path / "ws" / "out" / "new.txt").read_text() == "made\n"
    missing = call(executor, "Read", file_path="missing.txt")
    assert missing.is_error and missing.content.endswith(f"your current working directory is {RECORDED}.")


def test_the_real_workspace_path_is_outside_the_sandbox(executor: ClaudeToolExecutor, tmp_path: Path) -> None:
    # the host path is not in the sandbox's view: Read answers as Claude would there (nothing read on the host)
    read = call(executor, "Read", file_path=str(tmp_path / "ws" / "notes.txt"))
    assert read.is_error and read.content.startswith("File does not exist.") and "hello" not in read.content
    fresh = call(executor, "Bash", command=f"cat {tmp_path / 'ws' / 'notes.txt'}")
    assert fresh.is_error and "No such file or directory" in fresh.content


def test_a_replayed_connect_to_the_host_fails(executor: ClaudeToolExecutor) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        port = server.getsockname()[1]
        for command in (f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=5)\"",
                        f"curl -sS --max-time 5 http://127.0.0.1:{port}/"):
            if command.startswith("curl") and shutil.which("curl") is None:
                continue
            fresh = call(executor, "Bash", command=command)
            assert fresh.is_error, fresh.content
            assert "refused" in fresh.content.lower() or "couldn't connect" in fresh.content.lower(), fresh.content
    finally:
        server.close()
