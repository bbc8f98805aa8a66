"""Restoring a committed recording's initial workspace at its recorded cwd, under a per-cwd lock (real files)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

from forkpoint.testing.recordings import holding, recorded_cwd, replay_recording, restore_initial, restored_workspace

CLAUDE = Path(__file__).parents[1] / "fixtures" / "claude_code" / "2.1.220" / "single_bash"


def _fixture(tmp_path: Path, *, initial: bool = True) -> Path:
    fixture = tmp_path / "fixture"
    fixture.mkdir()
    (fixture / "meta.json").write_text(json.dumps({"cwd": str(tmp_path / "recorded" / "ws")}))
    if initial:
        (fixture / "workspace-initial" / "src").mkdir(parents=True)
        (fixture / "workspace-initial" / "src" / "a.txt").write_text("a\n")
        os.symlink("src/a.txt", fixture / "workspace-initial" / "link")
    return fixture


def _lock_is_free(cwd: Path) -> bool:
    probe = (f"import fcntl,sys; h=open({str(cwd.parent / f'.{cwd.name}.lock')!r},'w')\n"
             "try: fcntl.flock(h, fcntl.LOCK_EX|fcntl.LOCK_NB)\nexcept BlockingIOError: sys.exit(1)")
    return subprocess.run([sys.executable, "-c", probe], check=False).returncode == 0


def test_restore_replaces_the_recorded_cwd_and_keeps_symlinks(tmp_path: Path) -> None:
    fixture = _fixture(tmp_path)
    cwd = recorded_cwd(fixture)
    cwd.mkdir(parents=True)
    (cwd / "left-over").write_text("from an earlier run")
    assert restore_initial(fixture) == cwd
    assert sorted(p.name for p in cwd.iterdir()) == ["link", "src"]
    assert os.readlink(cwd / "link") == "src/a.txt" and (cwd / "src" / "a.txt").read_text() == "a\n"


def test_a_missing_initial_workspace_is_an_empty_one(tmp_path: Path) -> None:
    """git keeps no empty directory, so a recording made in an empty directory has no workspace-initial/."""
    fixture = _fixture(tmp_path, initial=False)
    assert list(restore_initial(fixture).iterdir()) == []


def test_the_cwd_is_held_for_the_block_and_removed_after_it(tmp_path: Path) -> None:
    fixture = _fixture(tmp_path)
    cwd = recorded_cwd(fixture)
    with restored_workspace(fixture) as workspace:
        assert workspace == cwd and (cwd / "src").is_dir()
        assert not _lock_is_free(cwd)  # another process waits instead of sharing the directory
    assert _lock_is_free(cwd) and not cwd.exists()
    with restored_workspace(fixture, remove=False):
        pass
    assert (cwd / "src" / "a.txt").is_file()


def test_holding_releases_the_lock_when_the_block_raises(tmp_path: Path) -> None:
    cwd = tmp_path / "x" / "ws"
    try:
        with holding(cwd):
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    with (cwd.parent / ".ws.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_replay_recording_runs_the_engine_in_the_restored_workspace(tmp_path: Path) -> None:
    result = replay_recording(CLAUDE, tmp_path, agent="claude-code", trajectory="session.jsonl", after=1,
                              prepare_only=True)
    assert result.failure is None and result.phase == "prepared" and result.run_id == "run-1"
    assert result.output_dir == str(tmp_path / "out" / "run-1")
    assert recorded_cwd(CLAUDE).is_dir()  # left in place for inspection
