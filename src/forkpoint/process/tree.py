"""Which processes belong to a supervised run: /proc scans, the attribution rules, and safe signalling (Linux).

How escaped descendants (``setsid``, double fork) are found: forkpoint marks itself as a *child subreaper*
(``prctl(PR_SET_CHILD_SUBREAPER)``) while at least one supervision runs, so an orphaned descendant is re-parented
to forkpoint instead of init and stays visible in ``/proc`` as a child of ours, which we can kill and reap. The
attribute is dropped when the last supervision ends: a program using forkpoint as a library would otherwise keep
adopting the orphans of its own process trees, and hold them as zombies it never waits for.
While a command runs, forkpoint's own process subtree is scanned through ``/proc/<pid>/task/<tid>/children``
and ``/proc/<pid>/stat`` (as a subreaper, that subtree holds every process the rules below can attribute; all
of ``/proc`` is read where subreaping or the children files are unavailable); a process belongs to the run when it is

1. in the leader's process group or session, or
2. a descendant (by ppid) of the leader, or
3. an orphan re-parented to forkpoint that carries the run's token in its environment
   (``FORKPOINT_SUPERVISION_ID``, added to the child's env), or
4. an orphan re-parented to forkpoint without the token (``env -i``) that started after the leader, while
   this is the only active supervision, or
5. remembered from an earlier scan,

together with all of its descendants. Rule 4 assumes forkpoint starts its commands through this package:
a plain ``Popen`` child started by another thread during a supervision could be mistaken for an orphan.
Remembered processes are identified by (pid, start time), and the leader is not reaped until cleanup is
over, so its pid (= the process group id) cannot be reused under the supervisor's ``killpg``. Individual
processes are signalled through pidfds after re-checking their start time.

The residual gap (with concurrent supervisions): a descendant that clears its environment *and* leaves the
session *and* is orphaned between two scans is not attributed. It is never waited for (the supervisor gives the
pipes a short grace once the leader and its group are gone). Where the command has a pids cgroup
(``forkpoint.process.limits``), the gap is closed: the cgroup still holds such a process, and it is killed when
the cgroup is emptied at the end.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from typing import NamedTuple

from forkpoint.process import reaper

SUPERVISION_ENV = reaper.SUPERVISION_ENV

_PR_SET_CHILD_SUBREAPER = 36
_PF_EXITING = 0x4  # include/linux/sched.h


# --------------------------------------------------------------------------------------------- subreaper

_subreaper_lock = threading.Lock()
_subreaper_supported: bool | None = None
_subreaper_holders = 0
_libc: ctypes.CDLL | None = None


def _set_subreaper(on: bool) -> bool:
    global _libc
    try:
        _libc = _libc or ctypes.CDLL(None, use_errno=True)
        return bool(_libc.prctl(_PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def hold_subreaper() -> bool:
    """Be a child subreaper while a supervision runs, so its orphaned descendants re-parent to us; False where
    unsupported. Paired with ``release_subreaper``: the attribute is dropped when the last supervision ends, so a
    process that uses forkpoint as a library does not go on adopting (and holding as zombies) the orphans of its
    own, unrelated process trees."""
    global _subreaper_supported, _subreaper_holders
    with _subreaper_lock:
        if _subreaper_holders == 0 and _subreaper_supported is not False:
            _subreaper_supported = _set_subreaper(True)
        _subreaper_holders += 1
        return bool(_subreaper_supported)


def release_subreaper() -> None:
    """One supervision ended; the last one out stops being a subreaper."""
    global _subreaper_holders
    with _subreaper_lock:
        _subreaper_holders = max(0, _subreaper_holders - 1)
        if _subreaper_holders == 0 and _subreaper_supported:
            _set_subreaper(False)


# --------------------------------------------------------------------------------------------- /proc


class ProcInfo(NamedTuple):
    """One line of ``/proc/<pid>/stat``, the fields attribution needs."""

    pid: int
    ppid: int
    pgid: int
    sid: int
    start: int
    state: str
    threads: int = 1
    flags: int = 0

    @property
    def exiting(self) -> bool:
        """The kernel is already tearing the process down (``PF_EXITING``): it runs no more user code, only
        its exit (e.g. a pid namespace's init killing and waiting for the namespace's processes)."""
        return bool(self.flags & _PF_EXITING)


def doomed(info: ProcInfo) -> bool:
    """The process is dying on its own: already exiting, or a SIGKILL is pending (e.g. bwrap's namespace init,
    sent SIGKILL by ``--die-with-parent`` when bwrap exits, before the kernel has run it). Neither can run user
    code again, so there is nothing to kill, only to wait for."""
    if info.exiting:
        return True
    try:
        with open(f"/proc/{info.pid}/status", "rb") as handle:
            status = handle.read(8192)
    except OSError:
        return True  # gone
    current = read_stat(info.pid)
    if current is None or current.start != info.start:
        return True  # gone (or the pid names another process now)
    for line in status.splitlines():
        if line.startswith((b"SigPnd:", b"ShdPnd:")):
            with contextlib.suppress(ValueError):
                if int(line.split()[1], 16) & (1 << (signal.SIGKILL - 1)):
                    return True
    return False


def read_stat(pid: int) -> ProcInfo | None:
    """The process's stat fields, or None when it is gone (or its stat cannot be parsed)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    # comm may contain spaces and parentheses: the fields start after the last ")".
    fields = raw[raw.rfind(b")") + 2 :].split(maxsplit=20)
    try:
        ppid, pgid, sid, start = int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19])
        return ProcInfo(pid, ppid, pgid, sid, start, fields[0].decode(), int(fields[17]), int(fields[6]))
    except (IndexError, ValueError):
        return None


def _scan_all() -> dict[int, ProcInfo]:
    """Every process of the machine (the fallback when the subtree walk is not possible)."""
    table: dict[int, ProcInfo] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return table
    for entry in entries:
        if entry.isdigit():
            info = read_stat(int(entry))
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


def _scan_tree(root: int) -> dict[int, ProcInfo]:
    """``root`` and all of its descendants, following the children links instead of reading all of /proc."""
    table: dict[int, ProcInfo] = {}
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in table:
            continue
        info = read_stat(pid)
        if info is None:
            continue
        table[pid] = info
        if info.state not in ("Z", "X"):
            stack.extend(reaper.children(pid, info.threads))
    return table


def _scan_proc() -> dict[int, ProcInfo]:
    """The processes a run can own: forkpoint's own subtree when we are a subreaper, else all of /proc.

    As a child subreaper, every descendant of ours stays in our subtree when its parent dies (it is
    re-parented to us or to a subreaper below us), and a process can only join the leader's session or
    group by descending from it. So the subtree holds every process the rules of the module docstring can
    attribute, and a scan costs a few reads instead of one per process of the machine.
    """
    if _subreaper_supported and _subreaper_holders > 0 and _children_supported():
        return _scan_tree(os.getpid())
    return _scan_all()


def _has_token(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return needle in handle.read().split(b"\0")
    except OSError:
        return False


def signal_process(info: ProcInfo, sig: int) -> None:
    """Signal one process, but only if the pid still names the process we saw (pidfd, then start time)."""
    try:
        pidfd = os.pidfd_open(info.pid)
    except OSError as exc:
        if exc.errno != errno.ENOSYS:
            return  # already gone
        current = read_stat(info.pid)
        if current is not None and current.start == info.start:
            with contextlib.suppress(OSError):
                os.kill(info.pid, sig)
        return
    try:
        current = read_stat(info.pid)
        if current is not None and current.start == info.start:
            signal.pidfd_send_signal(pidfd, sig)
    except OSError:
        pass
    finally:
        os.close(pidfd)


# --------------------------------------------------------------------------------------------- leaders

_active_lock = threading.Lock()
_active_leaders: set[int] = set()


def spawn_leader(start: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
    """Start a supervision's leader and register it under one lock: a scan of a concurrent supervision (another
    thread) that sees this child in /proc then also sees it registered, and never takes it for an orphan of its
    own (rule 4)."""
    with _active_lock:
        proc = start()
        _active_leaders.add(proc.pid)
    return proc


def active_leaders() -> set[int]:
    """The leaders of the supervisions running now (a copy)."""
    with _active_lock:
        return set(_active_leaders)


def unregister_leader(pid: int) -> None:
    """The supervision of ``pid`` is over: it no longer counts as an active leader."""
    with _active_lock:
        _active_leaders.discard(pid)


class Tracker:
    """Attributes processes to one run and remembers them across scans (see the module docstring)."""

    def __init__(self, leader: int, token: str) -> None:
        self.leader = leader
        self.needle = f"{SUPERVISION_ENV}={token}".encode()
        self.me = os.getpid()
        self.known: set[tuple[int, int]] = set()
        self.untagged: set[tuple[int, int]] = set()
        leader_info = read_stat(leader)
        self.leader_start = leader_info.start if leader_info is not None else 0
        self.alive: list[ProcInfo] = []

    def scan(self) -> list[ProcInfo]:
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
        members: dict[int, ProcInfo] = {}
        stack = roots
        while stack:
            pid = stack.pop()
            if pid in members or pid not in table:
                continue
            members[pid] = table[pid]
            stack.extend(children.get(pid, ()))
        alive: list[ProcInfo] = []
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
