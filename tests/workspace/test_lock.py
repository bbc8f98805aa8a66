"""The workspace lock: one run per workspace directory, whatever the path; a hostile lock dir is never used."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.workspace.lock import LOCK_DIR_ENV, lock_dir, lock_workspace


@pytest.fixture()
def locks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    directory = tmp_path / "locks"
    monkeypatch.setenv(LOCK_DIR_ENV, str(directory))
    return directory


def _refused(workspace: Path, run_id: str = "second") -> ReplayError:
    with pytest.raises(ReplayError) as caught:
        lock_workspace(workspace, run_id)
    return caught.value


def test_a_second_run_is_refused_naming_the_holder_until_it_releases(tmp_path: Path, locks: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    held = lock_workspace(workspace, "first-run")
    assert stat.S_IMODE(locks.stat().st_mode) == 0o700
    (lock_file,) = locks.iterdir()
    holder = json.loads(lock_file.read_bytes())
    assert (holder["run_id"], holder["pid"], holder["workspace"]) == ("first-run", os.getpid(), str(workspace))
    error = _refused(workspace)  # a second open file description conflicts even within one process
    assert (error.kind, error.kind.exit_code) == (ErrorKind.WORKSPACE, 20)
    expected = f"the workspace {workspace} is in use by forkpoint run 'first-run' (pid {os.getpid()}, since "
    assert expected in error.message
    assert list(workspace.iterdir()) == []  # nothing of the lock is in the workspace (its inventory is unchanged)
    held.release()
    held.release()  # idempotent
    assert list(locks.iterdir()) == []  # the holder unlinks its file
    with lock_workspace(workspace, "third"):
        pass


def test_every_path_to_the_same_directory_meets_the_same_lock(tmp_path: Path, locks: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (tmp_path / "alias").symlink_to(workspace)
    with lock_workspace(workspace, "first"):
        assert "'first'" in _refused(tmp_path / "alias").message
        assert "'first'" in _refused(workspace / "sub" / "..").message
        with lock_workspace(workspace / "sub", "other"):  # another directory is another lock
            pass


def test_a_stale_lock_file_of_a_dead_holder_is_taken_over(tmp_path: Path, locks: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with lock_workspace(workspace, "crashed"):
        (lock_file,) = locks.iterdir()
        stale = lock_file.read_bytes()
    lock_file.write_bytes(stale)  # what a kill -9 leaves: the file, without any flock on it
    with lock_workspace(workspace, "next"):
        assert json.loads(lock_file.read_bytes())["run_id"] == "next"


def test_a_symlinked_lock_dir_is_refused_and_never_written_through(tmp_path: Path, locks: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir(mode=0o700)
    locks.symlink_to(target)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with pytest.raises(ReplayError) as caught:
        lock_workspace(workspace, "r")
    assert caught.value.kind is ErrorKind.CONFIGURATION and "is not a directory" in caught.value.message
    assert list(target.iterdir()) == []


@pytest.mark.parametrize("hostile", ["shared mode", "foreign owner"])
def test_a_lock_dir_that_is_not_private_is_refused(tmp_path: Path, locks: Path, hostile: str) -> None:
    locks.mkdir()
    if hostile == "shared mode":
        locks.chmod(0o777)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a directory to another user needs root")
        os.chown(locks, 65534, 65534)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with pytest.raises(ReplayError) as caught:
        lock_workspace(workspace, "r")
    assert caught.value.kind is ErrorKind.CONFIGURATION and "is not private to you" in caught.value.message
    assert list(locks.iterdir()) == []


@pytest.mark.parametrize("planted", ["symlink", "fifo"])
def test_a_planted_lock_file_is_refused_without_following_or_blocking(
    tmp_path: Path, locks: Path, planted: str
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with lock_workspace(workspace, "probe"):
        (lock_file,) = locks.iterdir()  # learn the name, then plant something else there
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    if planted == "symlink":
        lock_file.symlink_to(victim)
    else:
        os.mkfifo(lock_file)
    error = _refused(workspace)
    assert error.kind is ErrorKind.WORKSPACE
    assert victim.read_text() == "precious\n"


def test_workspace_from_creates_the_directory_to_lock_it(tmp_path: Path, locks: Path) -> None:
    workspace = tmp_path / "new" / "ws"
    with lock_workspace(workspace, "creating", create=True):
        assert workspace.is_dir() and list(workspace.iterdir()) == []
        assert "'creating'" in _refused(workspace).message


def test_the_default_lock_dir_is_per_user(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LOCK_DIR_ENV, raising=False)
    assert lock_dir() == Path(f"/tmp/forkpoint-locks-{os.geteuid()}")
