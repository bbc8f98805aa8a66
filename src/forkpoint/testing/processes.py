"""Process checks for tests: a killed process is torn down asynchronously, so "it is gone" is waited for, bounded."""

from __future__ import annotations

import time


def alive(pid: int) -> bool:
    """True while ``pid`` names a live process (a zombie or a dead task is not alive)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except (FileNotFoundError, ProcessLookupError):
        return False
    fields = raw[raw.rfind(b")") + 2 :].split()
    return bool(fields) and fields[0] not in (b"Z", b"X")


def gone_within(pid: int, seconds: float = 10.0) -> bool:
    """Wait until ``pid`` is no longer alive, at most ``seconds`` (a deadline that fits a loaded machine)."""
    deadline = time.monotonic() + seconds
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True
