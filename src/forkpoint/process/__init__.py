"""Supervised subprocesses (Linux): run a command to completion or deadline and leave nothing of it running.

- ``supervise``: ``run_supervised`` and its event loop (deadline, SIGTERM then SIGKILL, stdin, pipe draining,
  optional output ``Watch``), the entry point every command of forkpoint goes through;
- ``tree``: which processes belong to a run (subreaper, /proc scans, the attribution rules) and safe signalling;
- ``capture``: bounded output heads and the size-capped log;
- ``environment``: the credential-stripped environment of a child;
- ``reaper``: nothing outlives forkpoint; ``childenv``: what a child's environment holds and the run's TMPDIR;
- ``loop_thread`` / ``loopback``: the background event loop the loopback servers share.

The names other modules use are re-exported here, loaded on first use: importing a light submodule (``childenv``)
must not load the supervisor (a prepare-only run never starts a process).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forkpoint.process.environment import sanitized_env
    from forkpoint.process.supervise import (
        DEFAULT_MAX_LOG_BYTES,
        DEFAULT_MAX_OUTPUT_BYTES,
        WATCH_TERMINATE,
        ProcessResult,
        Watch,
        run_supervised,
    )
    from forkpoint.process.tree import SUPERVISION_ENV

_HOMES = {
    "sanitized_env": "environment",
    "DEFAULT_MAX_LOG_BYTES": "supervise",
    "DEFAULT_MAX_OUTPUT_BYTES": "supervise",
    "WATCH_TERMINATE": "supervise",
    "ProcessResult": "supervise",
    "Watch": "supervise",
    "run_supervised": "supervise",
    "SUPERVISION_ENV": "tree",
}

__all__ = [
    "DEFAULT_MAX_LOG_BYTES",
    "DEFAULT_MAX_OUTPUT_BYTES",
    "SUPERVISION_ENV",
    "WATCH_TERMINATE",
    "ProcessResult",
    "Watch",
    "run_supervised",
    "sanitized_env",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'forkpoint.process' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"forkpoint.process.{home}"), name)
    globals()[name] = value
    return value
