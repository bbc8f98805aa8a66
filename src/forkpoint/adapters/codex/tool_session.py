"""Codex unified exec process sessions, re-run: an ``exec_command`` that yielded with its process running, then
the ``write_stdin`` calls that typed into it or polled it.

Measured on codex 0.171.0 (``tests/fixtures/codex/0.171.0/unified_exec``, scripted model):

- exec_command waits ``yield_time_ms`` (250..30,000) or until the process exits; still running, it answers
  ``Process running with session ID <random 1000..99999>`` with the output so far.
- write_stdin ``{"session_id", "chars", "yield_time_ms"}`` types ``chars`` and collects the output produced since
  the previous call until the yield time ends or the process exits. An empty ``chars`` (a poll) waits at least
  5,000 ms (``yield_time_ms: 250`` took 5.0 s), up to 300,000; with chars the window is 250..30,000 ms.
- Without ``tty: true`` the process reads /dev/null and a write with chars answers ``STDIN_CLOSED`` (the session
  lives on).
- A process that exited answers ``Process exited with code N`` and its session is gone: a later write (or a
  made-up id) answers ``write_stdin failed: Unknown process id N``.

The output split between calls depends on timing. The replay makes it deterministic where the recording says what
happened: a call recorded as "exited" waits for the exit (its yield time plus ``SLACK_S``), a call recorded as
"running" with K output bytes waits its yield time and then until K bytes are there (bounded the same way). What
is left over goes to the next call, as in Codex; a split that still differs is normalised as ``timing`` by the
comparison (``tools.session_timing``) when the session's concatenated output is equal.

Live sessions are keyed by the RECORDED session id (an int; anything else is refused before any effect), so the
fresh texts name the same ids. At most ``MAX_SESSIONS`` live at once (the oldest is killed, as Codex prunes);
``close`` kills them all at the end of the replay.
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.adapters.kit.shell import CommandOutput, _python_install
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process.session import PTY_SESSION_HELPER, LiveProcess
from forkpoint.sandbox.executor import SandboxExecutor, SandboxSession

if TYPE_CHECKING:
    from forkpoint.adapters.kit.shell import Runner

#: a live process session: its own supervised process, or one the replay's shared sandbox runs
Live = LiveProcess | SandboxSession
MIN_WRITE_YIELD_MS = 250
MAX_WRITE_YIELD_MS = 30_000
MIN_POLL_YIELD_MS = 5_000
MAX_POLL_YIELD_MS = 300_000
DEFAULT_WRITE_YIELD_MS = 250
SLACK_S = 5.0
MAX_SESSIONS = 64
MAX_PENDING_BYTES = 1024 * 1024
MAX_SESSION_ID = 2**31 - 1

STDIN_CLOSED = ("write_stdin failed: stdin is closed for this session; rerun exec_command with tty=true to keep "
                "stdin open")

_RUNNING = re.compile(r"^Process running with session ID (\d{1,20})$", re.M)
_EXITED = re.compile(r"^Process exited with code (-?\d{1,10})$", re.M)


@dataclass(frozen=True)
class Recorded:
    """What the recording says one call of a session ended with."""

    running: bool
    session_id: int | None
    output_bytes: int


def recorded_outcome(text: Any) -> Recorded | None:
    """Parse a recorded unified-exec observation (None: not one, e.g. an error text)."""
    if not isinstance(text, str) or not text.startswith("Chunk ID: "):
        return None
    head, sep, output = text.partition("\nOutput:\n")
    if not sep:
        return None
    running = _RUNNING.search(head)
    if running is None and _EXITED.search(head) is None:
        return None
    session = int(running.group(1)) if running else None
    if session is not None and session > MAX_SESSION_ID:
        session = None
    return Recorded(running is not None, session, len(output.encode("utf-8", "surrogatepass")))


def session_chunk(content: object) -> tuple[str, str] | None:
    """("running" or "exited N", the output) of a unified exec observation; None for any other text."""
    if not isinstance(content, str) or not content.startswith("Chunk ID: "):
        return None
    head, sep, output = content.partition("\nOutput:\n")
    exited = _EXITED.search(head)
    if not sep or (exited is None and _RUNNING.search(head) is None):
        return None
    return (f"exited {exited.group(1)}" if exited else "running"), output


def session_id_argument(value: Any) -> int:
    """The recorded ``session_id`` as a key; hostile values are refused before any effect (the call stays stale)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_SESSION_ID:
        raise ReplayError(ErrorKind.EXECUTOR, f"write_stdin session_id {str(value)[:40]!r} is not a process id "
                                              "forkpoint can replay", before_effect=True)
    return value


def clamp(value: int, low: int, high: int) -> int:
    return min(max(value, low), high)


class ProcessSessions:
    """The live process sessions of one replay run (one call at a time)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.live: dict[int, Live] = {}
        self.keys: dict[int, str] = {}  # session id -> this replay's key of the session (ids can be reused)
        self._started = 0

    def start(self, argv: list[str], cwd: str, env: dict[str, str], tty: bool) -> Live:
        readable = self.runner.readable
        if tty:
            argv = [sys.executable, "-I", "-c", PTY_SESSION_HELPER, *argv]
            readable = (*readable, _python_install())
        executor = self.runner.executor
        if isinstance(executor, SandboxExecutor):  # in the replay's one sandbox, with its other commands (its /tmp)
            return executor.start_session(argv, cwd=cwd, env=env, stdin=tty, writable=self.runner.writable,
                                          readable=readable, max_pending_bytes=MAX_PENDING_BYTES)
        command, host_cwd = self.runner.sandbox.confine(argv, cwd, network=False, writable=self.runner.writable,
                                                        readable=readable)
        return LiveProcess(command, cwd=Path(host_cwd), env=env, max_pending_bytes=MAX_PENDING_BYTES, stdin=tty)

    def collect(self, process: Live, started: float, yield_s: float, recorded: Recorded | None) -> CommandOutput:
        """Wait the way Codex would, steered by the recorded outcome (module docstring), then hand out the output."""
        if recorded is None:
            process.pump(started + yield_s, lambda: False)
        elif not recorded.running:
            process.pump(started + yield_s + SLACK_S, lambda: False)
        else:
            process.pump(started + yield_s, lambda: False)
            process.pump(started + yield_s + SLACK_S, lambda: len(process.pending.data) >= recorded.output_bytes)
        data, dropped = process.take()
        code = process.returncode if process.exited else None
        wall = time.monotonic() - started
        return CommandOutput(code, data, b"", len(data) + dropped, wall, process.background_cleanup, dropped > 0)

    def keep(self, session_id: int, process: Live) -> None:
        self.drop(session_id)
        while len(self.live) >= MAX_SESSIONS:
            self.drop(next(iter(self.live)))
        self.live[session_id] = process
        self._started += 1
        self.keys[session_id] = f"{session_id}#{self._started}"

    def drop(self, session_id: int) -> None:
        self.keys.pop(session_id, None)
        process = self.live.pop(session_id, None)
        if process is not None:
            process.kill()

    def close(self) -> None:
        while self.live:
            _, process = self.live.popitem()
            process.kill()
