"""Where the continued `claude` starts: the directory the replayed shell ended in, never outside the workspace."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from forkpoint.adapters.claude_code.launch import SHELL_STATE, resume_directory, save_shell_state


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
