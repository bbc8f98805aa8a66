"""Where the continued `claude` starts: the directory the replayed shell ended in, never outside the workspace."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import orjson
import pytest

from forkpoint.adapters.claude_code.launch import (
    MCP_CONFIG,
    SHELL_STATE,
    argv,
    continued_mcp,
    environment,
    recorded_entrypoint,
    recorded_tool_set,
    resume_directory,
    save_shell_state,
    stream_prompt,
)
from forkpoint.core.errors import ReplayError


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    workspace, state = tmp_path / "ws", tmp_path / "state"
    (workspace / "pkg" / "sub").mkdir(parents=True)
    return workspace, state


def test_the_replayed_shell_directory_becomes_the_launch_cwd(tmp_path: Path) -> None:
    workspace, state = _setup(tmp_path)
    save_shell_state(state, "pkg/sub")
    cwd, facts = resume_directory(state, workspace, "/rec/ws")
    assert cwd == "/rec/ws/pkg/sub"  # as the agent sees it (the recorded cwd under bwrap)
    assert facts == {"replayed": "pkg/sub", "restored": True, "project_root": "pkg/sub"}


def test_the_project_root_when_the_shell_stayed_or_no_state_was_left(tmp_path: Path) -> None:
    workspace, state = _setup(tmp_path)
    assert resume_directory(state, workspace, str(workspace)) == (str(workspace), {"replayed": ".", "restored": True})
    save_shell_state(state, ".")
    assert resume_directory(state, workspace, str(workspace))[0] == str(workspace)


def test_hostile_or_vanished_directories_fall_back_to_the_root_and_say_so(tmp_path: Path) -> None:
    workspace, state = _setup(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, workspace / "link")  # planted by a replayed command
    (workspace / "file").write_text("x")
    for relative in ("link", "../outside", "/etc", "gone", "file", "pkg/../..", "a\0b"):
        (state / SHELL_STATE).parent.mkdir(parents=True, exist_ok=True)
        (state / SHELL_STATE).write_bytes(orjson.dumps({"cwd": relative}))
        cwd, facts = resume_directory(state, workspace, str(workspace))
        assert cwd == str(workspace), relative
        assert facts["restored"] is False and facts["reason"], relative
    (state / SHELL_STATE).write_bytes(b"not json")
    assert resume_directory(state, workspace, str(workspace))[0] == str(workspace)


FIXTURES = Path(__file__).parents[2] / "fixtures" / "claude_code"


def _shape(*names: str) -> bytes:
    return orjson.dumps({"type": "api-request-shape", "shape": {"tools": [{"name": name} for name in names]}})


def test_a_recorded_explicit_tool_set_is_given_to_the_continuation() -> None:
    lines = (FIXTURES / "2.1.332" / "tasks" / "session.jsonl").read_bytes().splitlines()
    tools = recorded_tool_set(lines)
    assert tools == ["Bash", "NotebookEdit", "Read", "Skill", "TaskCreate", "TaskGet", "TaskList", "TaskUpdate"]
    command = argv(Path("/bin/claude"), "0b7c6f2e-7a43-4a58-9b0e-3f0a2d7f1c11", "nonce", None, tools)
    assert command[-2:] == ["--tools", "Bash,NotebookEdit,Read,Skill,TaskCreate,TaskGet,TaskList,TaskUpdate"]


def test_a_default_run_or_an_unknown_shape_keeps_claudes_default() -> None:
    default = (FIXTURES / "2.1.332" / "single_bash" / "session.jsonl").read_bytes().splitlines()
    assert recorded_tool_set(default) is None  # it has ToolSearch: the rest is deferred behind it
    assert recorded_tool_set((FIXTURES / "2.1.220" / "tasks" / "session.jsonl").read_bytes().splitlines()) is None
    assert recorded_tool_set([_shape("Bash", "mcp__srv__tool")]) is None
    assert recorded_tool_set([_shape("Bash", "--dangerously-load-everything")]) is None
    assert recorded_tool_set([_shape("Bash", "Read"), b"{not json", _shape("Bash")]) == ["Bash"]


def test_the_users_mcp_servers_are_given_to_the_continued_claude_and_made_visible(tmp_path: Path) -> None:
    """--mcp-config (issue 29): a validated copy of the servers lands in the agent's home and is the only MCP config
    the continued claude loads; what the stdio server's command and PYTHONPATH name is made readable in a sandbox."""
    lib = tmp_path / "srv-lib"
    lib.mkdir()
    user = tmp_path / "mcp.json"
    user.write_text(json.dumps({"mcpServers": {
        "tiny": {"command": "python3", "args": ["-m", "srv"], "env": {"PYTHONPATH": f"{lib}:/no/such/dir"}},
        "web": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X-K": "v"}}}, "junk": 1}))
    home = tmp_path / "home"
    home.mkdir()
    path, readable = continued_mcp(user, home, os.environ.get("PATH", os.defpath))
    assert path == home / ".claude" / MCP_CONFIG
    assert json.loads(path.read_text()) == {"mcpServers": {
        "tiny": {"command": "python3", "args": ["-m", "srv"], "env": {"PYTHONPATH": f"{lib}:/no/such/dir"}},
        "web": {"type": "http", "url": "http://127.0.0.1:9/mcp", "headers": {"X-K": "v"}}}}
    python = Path(os.path.realpath(shutil.which("python3") or ""))
    assert lib in readable and python.parent.parent in readable and Path("/no/such/dir") not in readable
    command = argv(Path("/bin/claude"), "0b7c6f2e-7a43-4a58-9b0e-3f0a2d7f1c11", "nonce", None, None, path)
    assert command[-3:] == ["--mcp-config", str(path), "--strict-mcp-config"]
    assert continued_mcp(None, home, "") == (None, ())


def test_the_mcp_config_copy_does_not_follow_a_link_planted_in_the_home(tmp_path: Path) -> None:
    user = tmp_path / "mcp.json"
    user.write_text(json.dumps({"mcpServers": {"tiny": {"command": "python3"}}}))
    home, outside = tmp_path / "home", tmp_path / "outside.json"
    (home / ".claude").mkdir(parents=True)
    (home / ".claude" / MCP_CONFIG).symlink_to(outside)
    with pytest.raises(ReplayError):
        continued_mcp(user, home, "")
    assert not outside.exists()


def test_an_agent_sdk_session_continues_with_the_sdks_entrypoint_and_stdin_prompt(tmp_path: Path) -> None:
    """Sessions the Agent SDK wrote (``entrypoint`` sdk-py/sdk-ts) continue as the SDK drives the binary; a CLI
    session (sdk-cli, cli) or a hostile value keeps the plain ``-p NONCE`` launch and its own entrypoint."""
    sdk = (FIXTURES / "2.1.332" / "sdk_query" / "session.jsonl").read_bytes().splitlines()
    cli = (FIXTURES / "2.1.332" / "single_bash" / "session.jsonl").read_bytes().splitlines()
    assert recorded_entrypoint(sdk) == "sdk-py"
    assert recorded_entrypoint(cli) is None
    assert recorded_entrypoint([orjson.dumps({"uuid": "u", "entrypoint": "sdk-py\nX=1"})]) is None
    command = argv(Path("/bin/claude"), "0b7c6f2e-7a43-4a58-9b0e-3f0a2d7f1c11", "nonce", None, stream_input=True)
    assert "nonce" not in command and command[3:6] == ["-p", "--input-format", "stream-json"]
    assert orjson.loads(stream_prompt("nonce")) == {"type": "user", "message": {"role": "user", "content": "nonce"}}
    base = {"PATH": "/usr/bin", "CLAUDE_CODE_ENTRYPOINT": "cli"}
    assert environment(base, tmp_path, "http://127.0.0.1:1", "k", "sdk-py")["CLAUDE_CODE_ENTRYPOINT"] == "sdk-py"
    assert "CLAUDE_CODE_ENTRYPOINT" not in environment(base, tmp_path, "http://127.0.0.1:1", "k", None)
