"""Supervised subprocess execution: deadlines, bounded output, and no surviving descendants (Linux).

A replayed tool call must never leave work running behind it, never hang forkpoint on a pipe held open by
a daemon, and never let a chatty command exhaust memory. So every command:

- starts as the leader of a new session and process group, so one ``killpg`` reaches the whole group;
- is terminated with SIGTERM, then SIGKILL after a grace period, when its deadline passes;
- has its remaining group members and *escaped* descendants killed after the leader exits.

How escaped descendants (``setsid``, double fork) are found: forkpoint marks itself as a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``, once per process), so an orphaned descendant is re-parented to
forkpoint instead of init and stays visible in ``/proc`` as a child of ours, which we can kill and reap.
While a command runs, forkpoint's own process subtree is scanned through ``/proc/<pid>/task/<tid>/children``
and ``/proc/<pid>/stat`` (as a subreaper, that subtree holds every process the rules below can attribute; all
of ``/proc`` is read where subreaping or the children files are unavailable) every 50 ms, backing off to
500 ms for long quiet commands, and every 50 ms again while terminating; a process belongs to the run when it is

1. in the leader's process group or session, or
2. a descendant (by ppid) of the leader, or
3. an orphan re-parented to forkpoint that carries the run's token in its environment
   (``FORKPOINT_SUPERVISION_ID``, added to the child's env), or
4. an orphan re-parented to forkpoint without the token (``env -i``) that started after the leader, while
   this is the only active supervision, or
5. remembered from an earlier scan,

together with all of its descendants. Rule 4 assumes forkpoint starts its commands through this module:
a plain ``Popen`` child started by another thread during a supervision could be mistaken for an orphan.
Remembered processes are identified by (pid, start time), and the leader is not reaped until cleanup is
over, so its pid (= the process group id) cannot be reused under our ``killpg``. Individual processes are
signalled through pidfds after re-checking their start time.

When forkpoint itself dies (``kill -9``), ``forkpoint.reaper`` takes over: a reaper process, started with the
first command, kills the runs' processes (leaders, descendants, daemons) when forkpoint's end closes its pipe;
long-lived children (``die_with_parent``: the agent, tool runners) also get ``PR_SET_PDEATHSIG`` = SIGKILL.
The supervisor never counts the reaper as a process of a run.

The residual gap (with concurrent supervisions): a descendant that clears its environment *and* leaves the
session *and* is orphaned between two scans is not attributed. It is never waited for: once the leader and
its group are gone, the pipes get a short grace and are then closed, so forkpoint does not hang on them.
cgroups would close the gap but are not available to an unprivileged process everywhere.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import selectors
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Protocol

from forkpoint import childenv, reaper
from forkpoint.errors import ErrorKind, ReplayError

DEFAULT_MAX_OUTPUT_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_LOG_BYTES = 256 * 1024 * 1024
SUPERVISION_ENV = reaper.SUPERVISION_ENV

_CHUNK = 64 * 1024
_TICK_S = 0.02
_EXIT = object()  # selector data of the leader's pidfd
_SCAN_INTERVAL_S = 0.05
_MAX_SCAN_INTERVAL_S = 0.5
_KILL_WAIT_S = 3.0
_PIPE_GRACE_S = 0.25
_PR_SET_CHILD_SUBREAPER = 36

_ALWAYS_DROPPED = frozenset({"PYTHONHOME", "PYTHONPATH", "VIRTUAL_ENV"})


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
    than the leader (group members, escaped descendants) were still running and had to be killed.
    ``*_truncated``: more output than was kept (or a pipe still open at the end).
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


def sanitized_env(base: Mapping[str, str], *, strip_credentials: bool) -> dict[str, str]:
    """The environment of a child: with ``strip_credentials`` (every replayed command, agent and tool runner),
    only ``base``'s allowlisted names plus the run's ``--env`` values (``forkpoint.childenv``); without it (forkpoint's
    own git/cp on the user's behalf), ``base`` minus what would redirect Python."""
    if strip_credentials:
        return {**childenv.allowlisted(base), **childenv.passed()}
    return {name: value for name, value in base.items() if name not in _ALWAYS_DROPPED}


# --------------------------------------------------------------------------------------------- subreaper

_subreaper_lock = threading.Lock()
_subreaper_state: bool | None = None


def _ensure_subreaper() -> bool:
    """Become a child subreaper once, so orphaned descendants re-parent to us; False where unsupported."""
    global _subreaper_state
    with _subreaper_lock:
        if _subreaper_state is None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                _subreaper_state = bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
            except (OSError, AttributeError):
                _subreaper_state = False
        return _subreaper_state


# --------------------------------------------------------------------------------------------- /proc


class _ProcInfo(NamedTuple):
    pid: int
    ppid: int
    pgid: int
    sid: int
    start: int
    state: str
    threads: int = 1


def _read_stat(pid: int) -> _ProcInfo | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    # comm may contain spaces and parentheses: the fields start after the last ")".
    fields = raw[raw.rfind(b")") + 2 :].split(maxsplit=20)
    try:
        ppid, pgid, sid, start = int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
        return _ProcInfo(pid, ppid, pgid, sid, start, fields[0].decode(), int(fields[17]))
    except (IndexError, ValueError):
        return None


def _scan_all() -> dict[int, _ProcInfo]:
    """Every process of the machine (the fallback when the subtree walk is not possible)."""
    table: dict[int, _ProcInfo] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if entry.isdigit():
            info = _read_stat(int(entry))
            if info is not None:
                table[info.pid] = info
    return table


_children_state: bool | None = None


def _children_supported() -> bool:
    """``/proc/<pid>/task/<tid>/children`` exists (CONFIG_PROC_CHILDREN); checked once."""
    global _children_state
    if _children_state is None:
        pid = os.getpid()
        _children_state = os.path.exists(f"/proc/{pid}/task/{pid}/children")
    return _children_state


def _children(pid: int, threads: int) -> list[int]:
    """The children of every thread of ``pid`` (a single-threaded process needs one read, no listdir)."""
    if threads == 1:
        tids = [str(pid)]
    else:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return []
    result: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                result.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
    return result


def _scan_tree(root: int) -> dict[int, _ProcInfo]:
    """``root`` and all of its descendants, following the children links instead of reading all of /proc."""
    table: dict[int, _ProcInfo] = {}
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in table:
            continue
        info = _read_stat(pid)
        if info is None:
            continue
        table[pid] = info
        if info.state not in ("Z", "X"):
            stack.extend(_children(pid, info.threads))
    return table


def _scan_proc() -> dict[int, _ProcInfo]:
    """The processes a run can own: forkpoint's own subtree when we are a subreaper, else all of /proc.

    As a child subreaper, every descendant of ours stays in our subtree when its parent dies (it is
    re-parented to us or to a subreaper below us), and a process can only join the leader's session or
    group by descending from it. So the subtree holds every process the rules of the module docstring can
    attribute, and a scan costs a few reads instead of one per process of the machine.
    """
    if _subreaper_state and _children_supported():
        return _scan_tree(os.getpid())
    return _scan_all()


def _has_token(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return needle in handle.read().split(b"\0")
    except OSError:
        return False


def _signal_process(info: _ProcInfo, sig: int) -> None:
    """Signal one process, but only if the pid still names the process we saw (pidfd, then start time)."""
    try:
        pidfd = os.pidfd_open(info.pid)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            return  # already gone
        current = _read_stat(info.pid)
        if current is not None and current.start == info.start:
            with contextlib.suppress(OSError):
                os.kill(info.pid, sig)
        return
    try:
        current = _read_stat(info.pid)
        if current is not None and current.start == info.start:
            signal.pidfd_send_signal(pidfd, sig)
    except OSError:
        pass
    finally:
        os.close(pidfd)


_active_lock = threading.Lock()
_active_leaders: set[int] = set()


class _Tracker:
    """Attributes processes to one run and remembers them across scans (see the module docstring)."""

    def __init__(self, leader: int, token: str) -> None:
        self.leader = leader
        self.needle = f"{SUPERVISION_ENV}={token}".encode()
        self.me = os.getpid()
        self.known: set[tuple[int, int]] = set()
        self.untagged: set[tuple[int, int]] = set()
        leader_info = _read_stat(leader)
        self.leader_start = leader_info.start if leader_info is not None else 0
        self.alive: list[_ProcInfo] = []

    def scan(self) -> list[_ProcInfo]:
        """Refresh the live members (leader excluded); reap attributed zombies that are our children."""
        table = _scan_proc()
        with _active_lock:  # after the table: every leader in it is registered by now (spawned under the lock)
            leaders = set(_active_leaders)
        children: dict[int, list[int]] = {}
        for info in table.values():
            children.setdefault(info.ppid, []).append(info.pid)
        roots = [self.leader]
        keeper = reaper.pid()
        for info in table.values():
            if info.pid in (self.leader, keeper):
                continue
            key = (info.pid, info.start)
            if info.pgid == self.leader or info.sid == self.leader or key in self.known:
                roots.append(info.pid)
            elif info.ppid == self.me and info.pid not in leaders:
                if key not in self.untagged and _has_token(info.pid, self.needle):
                    roots.append(info.pid)
                    continue
                if info.state != "Z":
                    self.untagged.add(key)  # environ is fixed at exec: no need to read it again
                if len(leaders) == 1 and info.start >= self.leader_start:
                    # Untagged (env cleared) but orphaned to us after our command started while no other
                    # supervision runs: it can only come from our command.
                    roots.append(info.pid)
        members: dict[int, _ProcInfo] = {}
        stack = roots
        while stack:
            pid = stack.pop()
            if pid in members or pid not in table:
                continue
            members[pid] = table[pid]
            stack.extend(children.get(pid, ()))
        alive: list[_ProcInfo] = []
        for info in members.values():
            if info.pid == self.leader:
                continue
            self.known.add((info.pid, info.start))
            if info.state in ("Z", "X"):
                if info.ppid == self.me:
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(info.pid, os.WNOHANG)
            else:
                alive.append(info)
        self.alive = alive
        return alive


# --------------------------------------------------------------------------------------------- capture


class _Capture:
    """Keeps the head of a stream up to a limit and counts the rest, so memory stays bounded."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.data = bytearray()
        self.total = 0
        self.open = True

    def feed(self, chunk: bytes) -> None:
        room = self.limit - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.total += len(chunk)

    @property
    def truncated(self) -> bool:
        return self.total > len(self.data)


class _Log:
    def __init__(self, path: Path, limit: int) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            self.fd = os.open(path, flags, 0o600)
            os.fchmod(self.fd, 0o600)  # an existing file keeps its old mode under O_CREAT
        except OSError as exc:
            message = f"create process log {path}: {exc.strerror or exc}"
            raise ReplayError(ErrorKind.EXECUTOR, message) from exc
        self.path = path
        self.limit = limit
        self.written = 0
        self.truncated = False

    def write(self, chunk: bytes) -> None:
        room = self.limit - self.written
        if room < len(chunk):
            self.truncated = True
            chunk = chunk[: max(room, 0)]
        view = memoryview(chunk)
        try:
            while view:
                count = os.write(self.fd, view)
                view = view[count:]
                self.written += count
        except OSError as exc:
            raise ReplayError(ErrorKind.EXECUTOR, f"write process log {self.path}: {exc.strerror}") from exc

    def close(self) -> None:
        os.close(self.fd)


# --------------------------------------------------------------------------------------------- supervision


class _Supervision:
    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        token: str,
        stdin: bytes | None,
        grace_s: float,
        max_output_bytes: int,
        log: _Log | None,
        watch: Watch | None = None,
    ) -> None:
        self.proc = proc
        self.watch = watch
        self.grace_s = grace_s
        self.log = log
        self.tracker = _Tracker(proc.pid, token)
        self.sel = selectors.DefaultSelector()
        self.out = _Capture(max_output_bytes)
        self.err = _Capture(max_output_bytes)
        self.stdin_view = memoryview(stdin or b"")
        self.exited = False
        self.timed_out = False
        self.background_cleanup = False
        self.last_scan = 0.0
        self.scan_interval = _SCAN_INTERVAL_S
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

    def _close_reader(self, fd: int, capture: _Capture) -> None:
        self.sel.unregister(fd)
        capture.open = False
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None and not pipe.closed and pipe.fileno() == fd:
                pipe.close()

    def _step(self, timeout: float) -> None:
        if self.sel.get_map():
            for key, _ in self.sel.select(timeout):
                if key.data is None:
                    self._write_stdin(key.fd)
                elif key.data is _EXIT:
                    self._close_exit_fd()
                else:
                    self._read(key.fd, key.data)
        else:
            time.sleep(timeout)
        now = time.monotonic()
        if now - self.last_scan >= self.scan_interval:
            self.last_scan = now
            self.tracker.scan()
            # A scan reads every /proc/<pid>/stat: back off while a long command runs quietly.
            self.scan_interval = min(self.scan_interval * 1.25, _MAX_SCAN_INTERVAL_S)

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

    def _read(self, fd: int, capture: _Capture) -> None:
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
            _signal_process(info, sig)

    def terminate(self) -> None:
        """SIGTERM everything of the run, give it the grace period, then SIGKILL until nothing is left."""
        self.scan_interval = _SCAN_INTERVAL_S
        self.tracker.scan()
        if self.tracker.alive:
            self.background_cleanup = True
        self._signal_all(signal.SIGTERM)
        self.pump_until(time.monotonic() + self.grace_s, self.settled)
        give_up = time.monotonic() + _KILL_WAIT_S
        while not self.settled() and time.monotonic() < give_up:
            self._signal_all(signal.SIGKILL)  # repeated: a member may fork between two scans
            self.scan_interval = _SCAN_INTERVAL_S
            self.pump_until(min(give_up, time.monotonic() + _SCAN_INTERVAL_S), self.settled)

    def run(self, timeout_s: float, pipe_grace_s: float) -> ProcessResult:
        start = time.monotonic()
        self.last_scan = start  # the first scan comes one interval in (or at exit): a fresh leader has no members
        self.pump_until(start + timeout_s, self.leader_exited if self.watch is None else self._watched_exit)
        if not self.leader_exited():
            self.timed_out = True
            self.terminate()
        self.tracker.scan()
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
        return all(key.data is None or key.data is _EXIT for key in self.sel.get_map().values())

    def _close_exit_fd(self) -> None:
        if self.exit_fd is not None:
            self.sel.unregister(self.exit_fd)
            os.close(self.exit_fd)
            self.exit_fd = None

    def close(self) -> None:
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
) -> ProcessResult:
    """Run ``argv`` to completion or deadline and leave nothing of it running.

    ``die_with_parent``: also set PR_SET_PDEATHSIG in the leader, for long-lived children (the agent, tool
    runners). It costs a full fork instead of vfork (5-30 ms with forkpoint's memory), too much per replayed
    command; ``forkpoint.reaper`` kills every command's processes when forkpoint dies either way.

    The command's own failures (non-zero exit, timeout, truncation) are in the result. Only supervision
    failures raise ``ReplayError`` (executor): the program cannot be started, or the log cannot be written.
    Without ``stdin`` the command gets /dev/null, so it can never read forkpoint's terminal.
    """
    if not argv:
        raise ValueError("argv must not be empty")
    if timeout_s <= 0 or grace_s < 0 or max_output_bytes < 0 or max_log_bytes < 0 or pipe_grace_s < 0:
        raise ValueError("timeouts and limits must be positive")
    _ensure_subreaper()
    reaper.start()
    token = reaper.INSTANCE + uuid.uuid4().hex[:16]  # the prefix lets the reaper find a run's processes
    child_env = dict(env)
    child_env[SUPERVISION_ENV] = token
    log = _Log(log_path, max_log_bytes) if log_path is not None else None
    try:
        try:
            # Spawn and register under one lock: a scan of a concurrent supervision (another thread) that sees
            # this child in /proc then also sees it registered, and never takes it for an orphan of its own.
            with _active_lock:
                proc = subprocess.Popen(
                    list(argv),
                    cwd=cwd,
                    env=child_env,
                    stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
                    start_new_session=True,
                    close_fds=True,
                    preexec_fn=reaper.die_with_parent_hook() if die_with_parent else None,
                )
                _active_leaders.add(proc.pid)
        except OSError as exc:
            raise ReplayError(
                ErrorKind.EXECUTOR, f"spawn supervised process {argv[0]!r}: {exc.strerror or exc}"
            ) from exc
        reaper.leader_started(proc.pid)
        supervision = _Supervision(proc, token, stdin, grace_s, max_output_bytes, log, watch)
        try:
            return supervision.run(timeout_s, pipe_grace_s)
        except BaseException:
            # Never leave the command behind, even when the log failed or we were interrupted.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            for info in supervision.tracker.scan():
                _signal_process(info, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=_KILL_WAIT_S)
            raise
        finally:
            supervision.close()
            with _active_lock:
                _active_leaders.discard(proc.pid)
            reaper.leader_done(proc.pid)
    finally:
        if log is not None:
            log.close()
