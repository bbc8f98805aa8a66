"""Supervised subprocesses (Linux): run a command to completion or deadline and leave nothing of it running.

- ``supervise``: ``run_supervised`` and its event loop (deadline, SIGTERM then SIGKILL, stdin, pipe draining,
  optional output ``Watch``), the entry point every command of forkpoint goes through;
- ``tree``: which processes belong to a run (subreaper, /proc scans, the attribution rules) and safe signalling;
- ``capture``: bounded output heads and the size-capped log;
- ``environment``: the credential-stripped environment of a child;
- ``limits``: the pids cgroup (process limit) of each command, and the run's record of it.

The names other modules use are re-exported here.
"""

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
