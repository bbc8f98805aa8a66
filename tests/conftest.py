"""Fixtures shared by the whole test suite."""

from __future__ import annotations

import os

import pytest


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
