"""A supervised process that stays alive between tool calls (Codex's unified exec process sessions).

``run_supervised`` runs a command to completion; an agent's process session instead yields with the command still
running and later writes to it or polls it. ``LiveProcess`` keeps the same guarantees across calls: it starts as a
supervised leader (own session and process group, registered with the reaper, subreaper held), its output is
drained into a bounded buffer whenever forkpoint pumps it, and ``kill`` (idempotent, called at the end of every
replay) terminates the whole run of processes, so nothing outlives the replay.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process import reaper
from forkpoint.process.supervise import _KILL_WAIT_S, _PIPE_GRACE_S, Watch, _Supervision
from forkpoint.process.tree import SUPERVISION_ENV, hold_subreaper, release_subreaper, spawn_leader, unregister_leader

#: Runs argv[1:] on a new 24x80 pseudo-terminal: what arrives on stdin is typed into it, what it prints goes to
#: stdout. Stdin EOF stops the typing only (the terminal stays open, as in Codex).
PTY_SESSION_HELPER = """
import fcntl, os, pty, select, struct, sys, termios
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        os.execv(sys.argv[1], sys.argv[1:])
    except OSError:
        os._exit(127)
inputs = [0, fd]
while fd in inputs:
    ready, _, _ = select.select(inputs, [], [])
    if 0 in ready:
        data = os.read(0, 65536)
        if data:
            os.write(fd, data)
        else:
            inputs.remove(0)
    if fd in ready:
        try:
            data = os.read(fd, 65536)
        except OSError:
            data = b""
        if not data:
            break
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
os._exit(code if code >= 0 else 128 - code)
"""


class _Pending:
    """A ``Watch`` that keeps the output not yet handed out, bounded (the rest is counted, not kept)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.dropped = 0

    def output(self, stream: str, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        self.data += chunk[: max(room, 0)]
        self.dropped += max(len(chunk) - max(room, 0), 0)

    def action(self, now: float) -> int | None:
        return None


class LiveProcess:
    """One process session: started once, written to and drained across calls, killed at the end."""

    def __init__(
        self, argv: Sequence[str], *, cwd: Path, env: Mapping[str, str], max_pending_bytes: int, stdin: bool = True
    ) -> None:
        """``stdin``: a pipe ``write`` types into; without it the process reads /dev/null."""
        if not argv:
            raise ValueError("argv must not be empty")
        reaper.start()
        token = reaper.INSTANCE + uuid.uuid4().hex[:16]
        child_env = {**env, SUPERVISION_ENV: token}
        self.pending = _Pending(max_pending_bytes)
        self.started = time.monotonic()
        self.returncode: int | None = None
        self.background_cleanup = False
        self._done = False
        hold_subreaper()
        try:
            self.proc = spawn_leader(lambda: subprocess.Popen(
                list(argv), cwd=cwd, env=child_env, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
            ))
        except OSError as exc:
            release_subreaper()
            raise ReplayError(ErrorKind.EXECUTOR, f"spawn process session {argv[0]!r}: {exc.strerror or exc}") from exc
        reaper.leader_started(self.proc.pid)
        watch: Watch = self.pending
        self._sup = _Supervision(self.proc, token, None, 0.25, 0, None, watch)
        if self.proc.stdin is not None:  # written by ``write``, not by the supervision loop (which would close it)
            self._sup.sel.unregister(self.proc.stdin.fileno())

    @property
    def has_stdin(self) -> bool:
        return self.proc.stdin is not None

    @property
    def exited(self) -> bool:
        return self._done or self._sup.leader_exited()

    def write(self, data: bytes, until: float | None = None) -> bool:
        """Type ``data`` into the process, draining its output meanwhile (a process that does not read cannot block
        forkpoint: the write gives up at ``until``, default 10 s); False when its stdin is gone or the time ran out."""
        stdin = self.proc.stdin
        if self._done or stdin is None or stdin.closed:
            return False
        deadline = time.monotonic() + 10.0 if until is None else until
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(stdin.fileno(), view[:65536]) :]
            except BlockingIOError:
                if time.monotonic() >= deadline or self._sup.leader_exited():
                    return False
                self._sup.pump_until(time.monotonic() + 0.02, lambda: False)
            except OSError:
                return False
        return True

    def pump(self, until: float, done: Callable[[], bool]) -> None:
        """Drain output until ``done()``, the leader's exit or ``until`` (monotonic)."""
        if not self._done:
            self._sup.pump_until(until, lambda: done() or self._sup.leader_exited())
            if self._sup.leader_exited():
                self._finish()

    def take(self) -> tuple[bytes, int]:
        """(the output since the last take, bytes dropped over the bound)."""
        data, dropped = bytes(self.pending.data), self.pending.dropped
        self.pending.data.clear()
        self.pending.dropped = 0
        return data, dropped

    def _finish(self) -> None:
        """The leader exited: kill what it left behind, drain the pipes, reap it, release the supervision."""
        if self._done:
            return
        sup = self._sup
        try:
            sup.tracker.scan()
            if sup.tracker.alive:
                sup.terminate()
                self.background_cleanup = True
            sup.pump_until(time.monotonic() + _PIPE_GRACE_S, sup._readers_closed)
            try:
                code: int | None = self.proc.wait(timeout=_KILL_WAIT_S)
            except subprocess.TimeoutExpired:
                code = None
            self.returncode = -1 if code is None else (128 - code if code < 0 else code)
        finally:
            self._release()

    def _release(self) -> None:
        self._done = True
        self._sup.close()
        unregister_leader(self.proc.pid)
        reaper.leader_done(self.proc.pid)
        release_subreaper()

    def kill(self) -> None:
        """End the session now (idempotent): the process and everything it started."""
        if self._done:
            return
        try:
            self._sup.terminate()
        finally:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=_KILL_WAIT_S)
            self._release()
