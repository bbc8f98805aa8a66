"""How many processes one supervised command may have: a pids cgroup per command (Linux), never a silent gap.

A replayed command or verifier runs as root in CI, where ``RLIMIT_NPROC`` does not apply and the default process
rlimit is above ``pid_max``: a fork storm would take the whole machine. So every supervised command gets a cgroup
of its own in the cgroup v1 ``pids`` hierarchy, with ``pids.max`` = ``--max-processes`` (default 512; the kernel
counts tasks, so threads count too). Forking past the limit fails with EAGAIN inside the command; forkpoint and
the rest of the machine are unaffected.

How a command is placed without a per-command ``preexec_fn`` (which would turn every spawn's vfork into a full
fork, 5-30 ms): in cgroup v1 a *thread* can be moved alone, and a child is created in its forking thread's cgroup.
The supervising thread moves itself into the command's cgroup (its ``tasks`` file), spawns the leader, and moves
back; other threads of forkpoint are never in it.

When the command ends, its cgroup is emptied and removed: ``pids.max`` drops to 0 (from then on nothing in it can
fork), every process still in ``cgroup.procs`` is SIGKILLed until none is left, and the directory is removed. That
also closes the attribution gap of ``forkpoint.process.tree`` (a descendant that cleared its environment, left the
session and was orphaned between two scans): whatever is still in the cgroup dies.

Where no pids cgroup can be made (no v1 ``pids`` hierarchy, a pure cgroup v2 host, no write access): a non-root
forkpoint sets ``RLIMIT_NPROC`` in the leader (``nproc_fallback``: the user's tasks + the limit, shared with the
user's other processes; ``process_limit.mechanism``: ``rlimit-nproc``); root, which the kernel exempts from it, runs
commands without a limit and the run's metadata says so with the reason (``unavailable``). A command that could not
be placed is counted (``commands_unlimited``) with the reason. Cgroups
of a forkpoint killed with ``kill -9`` (its reaper kills their processes) are removed by the next forkpoint that
finds them empty.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import resource
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_MAX_PROCESSES = 512
MECHANISM = "cgroup-v1-pids"
RLIMIT = "rlimit-nproc"
UNAVAILABLE = "unavailable"

_PREFIX = "forkpoint-"
_KILL_WAIT_S = 3.0
#: Where the kernel's view of the machine is read; a parameter so a test can show a host without cgroups.
PROC_ROOT = Path("/proc")


@dataclass(frozen=True)
class _Hierarchy:
    """This process's cgroup in the v1 pids hierarchy (``path``), or why there is none (``reason``)."""

    path: Path | None
    reason: str | None


_lock = threading.Lock()
_hierarchy: _Hierarchy | None = None
_serial = itertools.count()
_run: dict[str, Any] = {"max_processes": DEFAULT_MAX_PROCESSES, "commands": 0, "at_limit": 0, "unlimited": 0,
                        "unlimited_reason": None}


def _find_hierarchy() -> _Hierarchy:
    """The pids cgroup this process is in, writable by us, or the reason why not (read once per process)."""
    try:
        own = (PROC_ROOT / "self" / "cgroup").read_text("utf-8")
        mounts = (PROC_ROOT / "self" / "mountinfo").read_text("utf-8")
    except OSError as exc:
        return _Hierarchy(None, f"cannot read /proc/self/cgroup or mountinfo: {exc.strerror or exc}")
    relative = None
    for line in own.splitlines():
        number, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if number != "0" and "pids" in controllers.split(","):
            relative = path
    if relative is None:
        return _Hierarchy(None, "no cgroup v1 pids controller on this host (cgroup v2 pids delegation is not "
                                "supported yet)")
    for line in mounts.splitlines():
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        after = line.split(" - ", 1)[1].split()
        if len(after) < 3 or after[0] != "cgroup" or "pids" not in after[2].split(","):
            continue
        root, mount_point = fields[3], fields[4]
        if relative != root and not relative.startswith(root.rstrip("/") + "/"):
            continue
        inner = relative[len(root.rstrip("/")):].lstrip("/")
        found = Path(mount_point) / inner if inner else Path(mount_point)
        if not (found / "cgroup.procs").is_file() or not os.access(found, os.W_OK):
            return _Hierarchy(None, f"the pids cgroup {found} is not writable by uid {os.getuid()}")
        return _Hierarchy(found, None)
    return _Hierarchy(None, f"the pids cgroup {relative} is not mounted in this mount namespace")


def _hierarchy_now() -> _Hierarchy:
    global _hierarchy
    with _lock:
        if _hierarchy is None:
            _hierarchy = _find_hierarchy()
            if _hierarchy.path is not None:
                _remove_stale(_hierarchy.path)
        return _hierarchy


def _remove_stale(base: Path) -> None:
    """Remove empty cgroups left by a forkpoint that was killed (its reaper killed their processes)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(base):
            owner = entry.name[len(_PREFIX):].split("-", 1)[0]
            if entry.name.startswith(_PREFIX) and owner.isdigit() and not (PROC_ROOT / owner).exists():
                with contextlib.suppress(OSError):
                    os.rmdir(entry.path)


def _write(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    """A cgroup file, whole ("" when it cannot be read; never a cut-off pid list): no buffered file object."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    chunks: list[bytes] = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except OSError:
        return ""
    finally:
        os.close(fd)
    return b"".join(chunks).decode("ascii", "replace")


class CommandLimit:
    """The cgroup of one supervised command: created before the spawn, emptied and removed after the command."""

    def __init__(self, base: Path, max_processes: int) -> None:
        self.base = base
        self.max_processes = max_processes
        self.path = base / f"{_PREFIX}{os.getpid()}-{next(_serial)}"
        os.mkdir(self.path)
        try:  # one more while the spawning thread is inside, so that the leader's own fork fits (see ``leave``)
            _write(self.path / "pids.max", str(max_processes + 1))
        except OSError:
            os.rmdir(self.path)
            raise

    def enter(self) -> bool:
        """Move the calling thread (only) into the command's cgroup for the spawn; False (counted, with the reason)
        where it cannot be moved: the command then runs without a limit."""
        try:
            _write(self.path / "tasks", str(threading.get_native_id()))
        except OSError as exc:
            _unlimited(f"enter the pids cgroup {self.path}: {exc.strerror or exc}")
            return False
        return True

    def leave(self) -> None:
        """Back to forkpoint's own cgroup once the leader exists, and the limit down to ``max_processes`` (``members``
        never names forkpoint itself, so even a failure here could not make ``close`` kill it)."""
        for _ in range(3):
            try:
                _write(self.base / "tasks", str(threading.get_native_id()))
                break
            except OSError:
                continue
        with contextlib.suppress(OSError):
            _write(self.path / "pids.max", str(self.max_processes))

    def at_limit(self) -> bool:
        """Whether a fork in the command failed because of the limit (``pids.events``: ``max N``)."""
        text = _read(self.path / "pids.events")
        return any(line.split()[:1] == ["max"] and line.split()[1:2] != ["0"] for line in text.splitlines())

    def max_events(self) -> int:
        """How many forks failed at the limit so far (``pids.events``: ``max N``): a long-lived cgroup shared by
        one command after another (``forkpoint.sandbox.executor``) compares it before and after each."""
        for line in _read(self.path / "pids.events").splitlines():
            fields = line.split()
            if fields[:1] == ["max"] and len(fields) == 2 and fields[1].isdigit():
                return int(fields[1])
        return 0

    def _groups(self) -> list[Path]:
        """The command's cgroup and every cgroup below it (a nested forkpoint makes its own), parents first."""
        groups: list[Path] = []
        for directory, subdirectories, _ in os.walk(self.path):
            groups.append(Path(directory))
            subdirectories.sort()
        return groups

    def members(self) -> list[int]:
        """The processes in the command's cgroup tree, forkpoint itself excluded."""
        found: list[int] = []
        for group in self._groups():
            try:
                found += [int(pid) for pid in _read(group / "cgroup.procs").split()]
            except ValueError:
                continue
        return [pid for pid in found if pid != os.getpid()]

    def close(self, leader: int) -> bool:
        """Kill whatever is still in the cgroup tree (``pids.max`` 0 first: nothing in it can fork any more) and
        remove it; True when something was left. Our own children among them (orphans re-parented to the
        subreaper) are reaped, never the leader, whose ``Popen`` reaps it."""
        left = False
        killed: set[int] = set()
        with contextlib.suppress(OSError):
            _write(self.path / "pids.max", "0")  # hierarchical: holds for the cgroups below too
        give_up = time.monotonic() + _KILL_WAIT_S
        while True:
            members = self.members()
            if not members or time.monotonic() > give_up:
                break
            left = True
            for pid in members:
                killed.add(pid)
                _kill(pid, self.path.name)
            time.sleep(0.005)
        _reap(killed - {leader})
        deadline = time.monotonic() + _KILL_WAIT_S
        for group in reversed(self._groups()):
            while True:
                try:
                    os.rmdir(group)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY: the last members are still exiting
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.005)
        return left


def _reap(pids: set[int]) -> None:
    """Wait for the killed processes that are our children (a process leaves the cgroup an instant before it
    becomes a zombie), so none stays behind as a zombie of forkpoint."""
    from forkpoint.process.tree import active_leaders

    deadline = time.monotonic() + 0.5
    pending = set(pids) - active_leaders()  # a reused pid may name another supervision's leader: its Popen reaps it
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not ours (or reaped already)
                pending.discard(pid)
                continue
            if done:
                pending.discard(pid)
        if pending:
            time.sleep(0.002)


def _kill(pid: int, group: str) -> None:
    """SIGKILL ``pid`` if it is (still) in the cgroup named ``group``: the pidfd pins the process, and its
    /proc/<pid>/cgroup, read after, proves it is not a process that took over a reused pid (none can join the
    cgroup once ``pids.max`` is 0)."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        lines = _read(PROC_ROOT / str(pid) / "cgroup").splitlines()
        if any(group in line.rpartition(":")[2].split("/") for line in lines):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(pidfd)


def open_limit(max_processes: int | None) -> CommandLimit | None:
    """The cgroup for the next command (None, counted with the reason, where there can be none)."""
    limit = _run["max_processes"] if max_processes is None else max_processes
    hierarchy = _hierarchy_now()
    with _lock:
        _run["commands"] += 1
    if hierarchy.path is None:
        return None
    try:
        return CommandLimit(hierarchy.path, limit)
    except OSError as exc:
        _unlimited(f"create a pids cgroup in {hierarchy.path}: {exc.strerror or exc}")
        return None


def nproc_fallback(max_processes: int | None) -> int | None:
    """Where a command gets no cgroup and forkpoint is not root: the ``RLIMIT_NPROC`` for the command, the user's
    tasks now plus the limit (never above the current soft limit). Approximate: the kernel counts every task of the
    user, so the user's other processes share it. None for root, whom the kernel exempts."""
    if os.geteuid() == 0:
        return None
    from forkpoint.process.tree import read_stat

    uid = os.getuid()
    tasks = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(PROC_ROOT):
            if not entry.name.isdigit():
                continue
            try:
                if entry.stat().st_uid != uid:
                    continue
            except OSError:
                continue
            info = read_stat(int(entry.name))
            tasks += info.threads if info is not None else 0
    value = tasks + (_run["max_processes"] if max_processes is None else max_processes)
    soft, _hard = resource.getrlimit(resource.RLIMIT_NPROC)
    return value if soft == resource.RLIM_INFINITY else min(value, soft)


def _unlimited(reason: str) -> None:
    with _lock:
        _run["unlimited"] += 1
        _run["unlimited_reason"] = reason


def run_max_processes() -> int:
    """The process limit of the run in progress (``limiting``), 512 outside one."""
    with _lock:
        return int(_run["max_processes"])


def count_command(hit: bool) -> None:
    """Count a command run inside a long-lived cgroup (``forkpoint.sandbox.executor``), and whether it reached the
    limit, as ``open_limit`` / ``record_outcome`` count one with a cgroup of its own."""
    with _lock:
        _run["commands"] += 1
        if hit:
            _run["at_limit"] += 1


def record_outcome(limit: CommandLimit | None) -> bool:
    """Count a command that reached its limit (for the run's metadata); whether it did."""
    if limit is None or not limit.at_limit():
        return False
    with _lock:
        _run["at_limit"] += 1
    return True


@contextlib.contextmanager
def limiting(max_processes: int) -> Iterator[None]:
    """Every supervised command of the run in progress gets at most ``max_processes`` processes (one run at a time,
    like ``childenv.passing``); the counts start afresh and the previous settings come back afterwards."""
    if max_processes < 1:
        raise ValueError("max_processes must be at least 1")
    with _lock:
        before = dict(_run)
        _run.update(max_processes=max_processes, commands=0, at_limit=0, unlimited=0, unlimited_reason=None)
    try:
        yield
    finally:
        with _lock:
            _run.clear()
            _run.update(before)


def describe() -> dict[str, Any]:
    """The limit itself, without the run's counts (for a branch, whose commands share the run's counts)."""
    facts = metadata()
    return {key: facts[key] for key in ("max_processes", "mechanism", "reason") if key in facts}


def metadata() -> dict[str, Any]:
    """The run's process limit for result metadata: the mechanism (or ``unavailable`` and why) and the counts."""
    hierarchy = _hierarchy_now()
    with _lock:
        facts: dict[str, Any] = {"max_processes": _run["max_processes"], "commands": _run["commands"]}
        if hierarchy.path is None:
            if os.geteuid() != 0:
                return {**facts, "mechanism": RLIMIT, "reason": f"{hierarchy.reason}; RLIMIT_NPROC = the user's tasks "
                        "at each command's start + max_processes, shared with the user's other processes"}
            return {**facts, "mechanism": UNAVAILABLE, "reason": hierarchy.reason}
        facts.update(mechanism=MECHANISM, commands_at_limit=_run["at_limit"])
        if _run["unlimited"]:
            facts.update(commands_unlimited=_run["unlimited"], reason=_run["unlimited_reason"])
        return facts
