"""Where the continued `claude` starts: the directory the replayed shell ended in, never outside the workspace."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from forkpoint.adapters.claude_code.launch import (
    SHELL_STATE,
    argv,
    recorded_tool_set,
    resume_directory,
    save_shell_state,
)


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
