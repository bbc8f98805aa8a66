"""Supervised subprocess execution: deadlines, bounded output, and no surviving descendants (Linux).

A replayed tool call must never leave work running behind it, never hang forkpoint on a pipe held open by
a daemon, and never let a chatty command exhaust memory. So every command:

- starts as the leader of a new session and process group, so one ``killpg`` reaches the whole group;
- is terminated with SIGTERM, then SIGKILL after a grace period, when its deadline passes;
- has its remaining group members and *escaped* descendants (``forkpoint.process.tree`` says which processes
  belong to a run) killed after the leader exits;
- runs in a pids cgroup of its own where the host offers one (``forkpoint.process.limits``): at most
  ``max_processes`` processes, and whatever is still in the cgroup at the end is killed with it.

One event loop per command drains stdout/stderr (``forkpoint.process.capture``), feeds stdin, wakes on the
leader's exit (pidfd) and rescans the run's processes every 50 ms, backing off to 500 ms for long quiet commands.
Once the leader has exited, waiting for the rest is fast: rescans start 1 ms apart (backing off to 50 ms), and
members that are already dying (``tree.doomed``: exiting, or SIGKILL pending; bwrap's pid namespace init after
bwrap exits) are waited for through their pidfds instead of being signalled and reported as background work.
Once the leader and its group are gone, the pipes get a short grace and are then closed, so an unattributed
holder of a pipe cannot hang forkpoint.

When forkpoint itself dies (``kill -9``), ``forkpoint.process.reaper`` takes over: a reaper process, started with the
first command, kills the runs' processes (leaders, descendants, daemons) when forkpoint's end closes its pipe;
long-lived children (``die_with_parent``: the agent, tool runners) also get ``PR_SET_PDEATHSIG`` = SIGKILL.
The supervisor never counts the reaper as a process of a run.
"""

from __future__ import annotations

import contextlib
import os
import resource
import selectors
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process import limits, reaper
from forkpoint.process.capture import Capture, Log
from forkpoint.process.tree import (
    SUPERVISION_ENV,
    Tracker,
    doomed,
    hold_subreaper,
    release_subreaper,
    signal_process,
    spawn_leader,
    unregister_leader,
)

DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_LOG_BYTES = 256 * 1024 * 1024

_CHUNK = 64 * 1024
_TICK_S = 0.02
_EXIT = object()  # selector data of the leader's pidfd
_MEMBER_EXIT = object()  # selector data of a dying member's pidfd
_SCAN_INTERVAL_S = 0.05
_MAX_SCAN_INTERVAL_S = 0.5
_FAST_SCAN_S = 0.001  # the first rescan once the end is near: dying processes are usually gone within a few ms
_KILL_WAIT_S = 3.0
_PIPE_GRACE_S = 0.25


class Watch(Protocol):
    """An optional observer of a supervised command's output (e.g. an agent's step and idle watchdogs).

    ``output`` sees every chunk as it is read (``stream`` is "stdout" or "stderr"); ``action`` is asked after
    every poll tick and returns a signal to send to the command's process group now, ``WATCH_TERMINATE`` to end
    the command (SIGTERM, grace, SIGKILL), or None. The watch records why it acted; the result does not.
    """

    def output(self, stream: str, chunk: bytes) -> None: ...

    def action(self, now: float) -> int | None: ...


WATCH_TERMINATE = -1


@dataclass(frozen=True)
class ProcessResult:
    """What a supervised command did.

    ``returncode`` is ``-signal`` when killed, None if never reaped. ``background_cleanup``: processes other
    than the leader (group members, escaped descendants) were still running and had to be killed (one already
    dying on its own when the leader exited, like bwrap's namespace init, is only waited for and not counted).
    ``*_truncated``: more output than was kept (or a pipe still open at the end). ``process_limit_hit``: a fork
    of the command failed at its process limit (``forkpoint.process.limits``).
    """

    returncode: int | None
    stdout: bytes
    stderr: bytes
    stdout_truncated: bool
    stderr_truncated: bool
    timed_out: bool
    background_cleanup: bool
    duration_s: float
    log_truncated: bool = False
    process_limit_hit: bool = False


class _Supervision:
    """One running command: its pipes, its run's processes (``Tracker``) and the loop that ends it."""

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        token: str,
        stdin: bytes | None,
        grace_s: float,
        max_output_bytes: int,
        log: Log | None,
        watch: Watch | None = None,
    ) -> None:
        self.proc = proc
        self.watch = watch
        self.grace_s = grace_s
        self.log = log
        self.tracker = Tracker(proc.pid, token)
        self.sel = selectors.DefaultSelector()
        self.out = Capture(max_output_bytes)
        self.err = Capture(max_output_bytes)
        self.stdin_view = memoryview(stdin or b"")
        self.exited = False
        self.timed_out = False
        self.background_cleanup = False
        self.last_scan = 0.0
        self.scan_interval = _SCAN_INTERVAL_S
        self.scan_cap = _MAX_SCAN_INTERVAL_S
        self.scan_growth = 1.25
        for pipe, capture in ((proc.stdout, self.out), (proc.stderr, self.err)):
            if pipe is None:
                capture.open = False
                continue
            os.set_blocking(pipe.fileno(), False)
            self.sel.register(pipe.fileno(), selectors.EVENT_READ, capture)
        if proc.stdin is not None:
            os.set_blocking(proc.stdin.fileno(), False)
            self.sel.register(proc.stdin.fileno(), selectors.EVENT_WRITE, None)
        # The leader's exit wakes the loop too: once the pipes are closed, waiting for the exit would otherwise
        # sleep a whole tick per command (a pidfd is readable when the process exits; Linux >= 5.3).
        self.exit_fd: int | None = None
        self.member_fds: set[int] = set()
        with contextlib.suppress(OSError, AttributeError):
            self.exit_fd = os.pidfd_open(proc.pid)
            self.sel.register(self.exit_fd, selectors.EVENT_READ, _EXIT)

    # -- state

    def leader_exited(self) -> bool:
        """Exit check without reaping: the zombie keeps the pid (and so the pgid) from being reused."""
        if not self.exited:
            try:
                status = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:  # already reaped
                self.exited = True
            else:
                self.exited = status is not None
        return self.exited

    def settled(self) -> bool:
        return self.leader_exited() and not self.tracker.alive

    # -- event loop

    def _close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.sel.unregister(self.proc.stdin.fileno())
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def _close_reader(self, fd: int, capture: Capture) -> None:
        self.sel.unregister(fd)
        capture.open = False
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None and not pipe.closed and pipe.fileno() == fd:
                pipe.close()

    def _step(self, timeout: float) -> None:
        timeout = max(0.0, min(timeout, self.last_scan + self.scan_interval - time.monotonic()))
        if self.sel.get_map():
            for key, _ in self.sel.select(timeout):
                if key.data is None:
                    self._write_stdin(key.fd)
                elif key.data is _EXIT:
                    self._close_exit_fd()
                elif key.data is _MEMBER_EXIT:
                    self._close_member_fd(key.fd)
                    self.last_scan = -self.scan_interval  # rescan now
                else:
                    self._read(key.fd, key.data)
        else:
            time.sleep(timeout)
        now = time.monotonic()
        if now - self.last_scan >= self.scan_interval:
            self.last_scan = now
            self.tracker.scan()
            # A scan reads every /proc/<pid>/stat: back off while a long command runs quietly.
            self.scan_interval = min(self.scan_interval * self.scan_growth, self.scan_cap)

    def _scan_fast(self) -> None:
        """From now on rescan after 1 ms, backing off to 50 ms: the loop is waiting for processes to die, and a
        fixed 50 ms scan made every command with a dying member (bwrap's namespace init) cost 50 ms more."""
        self.last_scan = time.monotonic()
        self.scan_interval = _FAST_SCAN_S
        self.scan_cap = _SCAN_INTERVAL_S
        self.scan_growth = 1.5

    def _only_doomed(self) -> bool:
        """Members remain, and every one is dying on its own (``tree.doomed``): nothing to kill, only to wait for."""
        return bool(self.tracker.alive) and all(doomed(info) for info in self.tracker.alive)

    def _write_stdin(self, fd: int) -> None:
        try:
            count = os.write(fd, self.stdin_view[:_CHUNK])
        except BlockingIOError:
            return
        except OSError:  # EPIPE: the command stopped reading; that is its business
            self._close_stdin()
            return
        self.stdin_view = self.stdin_view[count:]
        if not self.stdin_view:
            self._close_stdin()

    def _read(self, fd: int, capture: Capture) -> None:
        try:
            chunk = os.read(fd, _CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self._close_reader(fd, capture)
            return
        capture.feed(chunk)
        if self.log is not None:
            self.log.write(chunk)
        if self.watch is not None:
            self.watch.output("stdout" if capture is self.out else "stderr", chunk)

    def pump_until(self, until: float, done: Callable[[], bool]) -> None:
        """Keep pipes drained (so nothing blocks on a full pipe) until ``done`` or the time limit."""
        while not done():
            remaining = until - time.monotonic()
            if remaining <= 0:
                return
            self._step(min(_TICK_S, remaining))

    # -- termination

    def _signal_all(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)  # safe: the leader is not reaped yet, so the pgid is still ours
        for info in self.tracker.alive:
            signal_process(info, sig)

    def terminate(self) -> None:
        """SIGTERM everything of the run, give it the grace period, then SIGKILL until nothing is left."""
        self._scan_fast()
        self.tracker.scan()
        if self.tracker.alive:
            self.background_cleanup = True
        self._signal_all(signal.SIGTERM)
        self.pump_until(time.monotonic() + self.grace_s, self.settled)
        give_up = time.monotonic() + _KILL_WAIT_S
        while not self.settled() and time.monotonic() < give_up:
            self._signal_all(signal.SIGKILL)  # repeated: a member may fork between two scans
            self._scan_fast()
            self.pump_until(min(give_up, time.monotonic() + _SCAN_INTERVAL_S), self.settled)

    def run(self, timeout_s: float, pipe_grace_s: float) -> ProcessResult:
        start = time.monotonic()
        self.last_scan = start  # the first scan comes one interval in (or at exit): a fresh leader has no members
        self.pump_until(start + timeout_s, self.leader_exited if self.watch is None else self._watched_exit)
        if not self.leader_exited():
            self.timed_out = True
            self.terminate()
        self.tracker.scan()
        if self._only_doomed():
            # Processes already dying (bwrap's pid namespace init, killed with its parent, reaping the namespace)
            # are no background work: wait for them (their pidfds wake the loop), briefly, instead of counting and
            # signalling them.
            members = {info.pid for info in self.tracker.alive}
            # A dying process whose parent is dying with it was left running inside the namespace: background work.
            self.background_cleanup = any(info.ppid in members for info in self.tracker.alive)
            self._watch_members()
            self._scan_fast()
            self.pump_until(time.monotonic() + _KILL_WAIT_S, lambda: not self._only_doomed())
            self._close_member_fds()
        if self.tracker.alive:
            self.terminate()
        # Output written before exit is still in the pipes; an unattributed holder gets only a short grace.
        self.pump_until(time.monotonic() + pipe_grace_s, self._readers_closed)
        self._close_exit_fd()
        for key in list(self.sel.get_map().values()):
            if key.data is None:
                self._close_stdin()
            else:
                key.data.total += 1  # the stream may have had more to say: report it as truncated
                self._close_reader(key.fd, key.data)
        try:
            returncode: int | None = self.proc.wait(timeout=_KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            returncode = None
        if self.tracker.known:  # reap what died during the drain (with no member after the exit, none can appear)
            self.tracker.scan()
        return ProcessResult(
            returncode=returncode,
            stdout=bytes(self.out.data),
            stderr=bytes(self.err.data),
            stdout_truncated=self.out.truncated,
            stderr_truncated=self.err.truncated,
            timed_out=self.timed_out,
            background_cleanup=self.background_cleanup,
            duration_s=time.monotonic() - start,
            log_truncated=self.log.truncated if self.log is not None else False,
        )

    def _watched_exit(self) -> bool:
        """``leader_exited`` that first lets the watch signal or end the command."""
        if self.leader_exited():
            return True
        assert self.watch is not None
        sig = self.watch.action(time.monotonic())
        if sig == WATCH_TERMINATE:
            self.terminate()
            return True
        if sig is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, sig)  # the leader is not reaped yet: the pgid is still ours
        return False

    def _readers_closed(self) -> bool:
        return all(key.data is None or key.data is _EXIT or key.data is _MEMBER_EXIT
                   for key in self.sel.get_map().values())

    def _watch_members(self) -> None:
        """Wake the loop when a current member exits (its pidfd turns readable); the scan then sees it gone."""
        for info in self.tracker.alive:
            try:
                fd = os.pidfd_open(info.pid)
            except (OSError, AttributeError):
                continue  # gone already (or no pidfds: the fast scans find it)
            self.member_fds.add(fd)
            self.sel.register(fd, selectors.EVENT_READ, _MEMBER_EXIT)

    def _close_member_fd(self, fd: int) -> None:
        self.member_fds.discard(fd)
        self.sel.unregister(fd)
        os.close(fd)

    def _close_member_fds(self) -> None:
        for fd in list(self.member_fds):
            self._close_member_fd(fd)

    def _close_exit_fd(self) -> None:
        if self.exit_fd is not None:
            self.sel.unregister(self.exit_fd)
            os.close(self.exit_fd)
            self.exit_fd = None

    def close(self) -> None:
        self._close_member_fds()
        self._close_exit_fd()
        self.sel.close()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


def run_supervised(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    stdin: bytes | None = None,
    grace_s: float = 0.25,
    max_output_bytes: int = DEFAULT_MAX_OUTPUT_BYTES,
    merge_stderr: bool = False,
    log_path: Path | None = None,
    max_log_bytes: int = DEFAULT_MAX_LOG_BYTES,
    pipe_grace_s: float = _PIPE_GRACE_S,
    watch: Watch | None = None,
    die_with_parent: bool = False,
    max_processes: int | None = None,
) -> ProcessResult:
    """Run ``argv`` to completion or deadline and leave nothing of it running.

    ``die_with_parent``: also set PR_SET_PDEATHSIG in the leader, for long-lived children (the agent, tool
    runners). It costs a full fork instead of vfork (5-30 ms with forkpoint's memory), too much per replayed
    command; ``forkpoint.process.reaper`` kills every command's processes when forkpoint dies either way.

    The command's own failures (non-zero exit, timeout, truncation) are in the result. Only supervision
    failures raise ``ReplayError`` (executor): the program cannot be started, or the log cannot be written.
    Without ``stdin`` the command gets /dev/null, so it can never read forkpoint's terminal.
    ``max_processes``: the command's process limit [default: the run's, ``limits.limiting``; 512 outside a run].
    """
    if not argv:
        raise ValueError("argv must not be empty")
    if timeout_s <= 0 or grace_s < 0 or max_output_bytes < 0 or max_log_bytes < 0 or pipe_grace_s < 0:
        raise ValueError("timeouts and limits must be positive")
    reaper.start()
    token = reaper.INSTANCE + uuid.uuid4().hex[:16]  # the prefix lets the reaper find a run's processes
    child_env = dict(env)
    child_env[SUPERVISION_ENV] = token
    log = Log(log_path, max_log_bytes) if log_path is not None else None
    hold_subreaper()  # before the spawn, released after the cleanup: the run's orphans re-parent to us meanwhile
    limit = limits.open_limit(max_processes)
    nproc = limits.nproc_fallback(max_processes) if limit is None else None
    if limit is not None:
        reaper.cgroup_started(str(limit.path))
    hit = left = False
    try:
        try:
            proc = spawn_leader(lambda: _spawn(limit, lambda: subprocess.Popen(
                list(argv),
                cwd=cwd,
                env=child_env,
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                start_new_session=True,
                close_fds=True,
                preexec_fn=_child_setup(die_with_parent, watch is not None, nproc),
            )))
        except OSError as exc:
            raise ReplayError(
                ErrorKind.EXECUTOR, f"spawn supervised process {argv[0]!r}: {exc.strerror or exc}"
            ) from exc
        reaper.leader_started(proc.pid)
        supervision = _Supervision(proc, token, stdin, grace_s, max_output_bytes, log, watch)
        try:
            result = supervision.run(timeout_s, pipe_grace_s)
        except BaseException:
            # Never leave the command behind, even when the log failed or we were interrupted.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            for info in supervision.tracker.scan():
                signal_process(info, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_KILL_WAIT_S)
            raise
        finally:
            supervision.close()
            unregister_leader(proc.pid)
            reaper.leader_done(proc.pid)
            if limit is not None:  # whatever the tracker could not attribute dies with the cgroup
                hit = limits.record_outcome(limit)
                left = limit.close(proc.pid)
                reaper.cgroup_done(str(limit.path))
                limit = None
        return replace(result, process_limit_hit=hit, background_cleanup=result.background_cleanup or left)
    finally:
        if limit is not None:  # the spawn failed
            limit.close(0)
            reaper.cgroup_done(str(limit.path))
        release_subreaper()
        if log is not None:
            log.close()


def _spawn(limit: limits.CommandLimit | None,
           start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """Start the leader inside the command's cgroup (``limits``: only this thread enters it, for the spawn)."""
    if limit is None or not limit.enter():
        return start()
    try:
        return start()
    finally:
        limit.leave()


def _child_setup(die_with_parent: bool, watched: bool, nproc: int | None = None) -> Callable[[], None] | None:
    """The ``preexec_fn`` of a supervised leader, or None (a spawn without one is cheaper).

    A watched child may get SIGINT from its watch; a forkpoint started in the background of a shell inherits SIGINT
    ignored, and an ignored signal stays ignored across exec, so the child gets the default disposition back.
    ``nproc``: the ``RLIMIT_NPROC`` of the fallback where the command has no pids cgroup (``limits``).
    """
    pdeath = reaper.die_with_parent_hook() if die_with_parent else None
    if not watched and nproc is None:
        return pdeath
    hard = resource.getrlimit(resource.RLIMIT_NPROC)[1] if nproc is not None else 0

    def setup() -> None:
        if watched:
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, hard))
        if pdeath is not None:
            pdeath()

    return setup
