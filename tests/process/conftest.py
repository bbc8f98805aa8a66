"""Helpers of the supervisor tests: a bash command under supervision and a check that a pid is really gone."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forkpoint.process import ProcessResult, run_supervised


def _alive(pid: int) -> bool:
    """True while the pid names a live (non-zombie) process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return False
    return raw[raw.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


@pytest.fixture()
def bash(tmp_path: Path) -> Callable[..., ProcessResult]:
    """``bash(script, timeout_s=10, **run_supervised options)``, run in ``tmp_path`` with this environment."""

    def run(script: str, *, timeout_s: float = 10.0, **kwargs: Any) -> ProcessResult:
        return run_supervised(["/bin/bash", "-c", script], cwd=tmp_path, env=dict(os.environ), timeout_s=timeout_s,
                              **kwargs)

    return run


@pytest.fixture()
def assert_dead() -> Callable[[int], None]:
    """``assert_dead(pid)``: the process is gone (or a zombie) within 10 s (a killed process is torn down
    asynchronously; on a loaded machine that can take more than a second)."""

    def check(pid: int) -> None:
        deadline = time.monotonic() + 10.0
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(pid), f"pid {pid} survived supervision"
        assert not os.path.exists(f"/proc/{pid}") or not _alive(pid)

    return check
