"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_workspace_lock_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Workspace locks (forkpoint.workspace_lock) of every run the suite starts live under pytest's tmp dir, not in
    /tmp/forkpoint-locks-<uid>; subprocesses inherit it."""
    previous = os.environ.get("FORKPOINT_LOCK_DIR")
    os.environ["FORKPOINT_LOCK_DIR"] = str(tmp_path_factory.mktemp("workspace-locks"))
    yield
    if previous is None:
        os.environ.pop("FORKPOINT_LOCK_DIR", None)
    else:
        os.environ["FORKPOINT_LOCK_DIR"] = previous


@pytest.fixture()
def fsynced_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The path behind every fsync from now on, in order (the real os.fsync still runs)."""
    synced: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return synced
