"""Nothing of a run outlives forkpoint, even after ``kill -9``: a small reaper process that holds the tree.

``forkpoint.process`` kills every process of a command when the command ends, but only while forkpoint lives.
If forkpoint itself is killed (``kill -9``, OOM killer), its long-lived children (the agent, tool runners:
``run_supervised(die_with_parent=True)``) get ``PR_SET_PDEATHSIG`` = SIGKILL (set in the child before exec;
the kernel sends it when the *thread* that forked exits, and every supervised command is forked by the thread
that supervises it until it ends). That is not enough: the signal is not inherited, so a child's own
children, daemons (``setsid``, double fork, ``nohup``) and the agent's tools would keep running, re-parented to
init; and a per-command preexec hook would cost a full fork (5-30 ms) per replayed command. So the first
supervised command also starts this reaper, which covers every command:

- a separate Python process (``python -I -S reaper.py OWNER``: stdlib only, isolated from the environment
  and the working directory), in a session of its own (a Ctrl-C or ``killpg`` aimed at forkpoint's group
  does not reach it), with an empty environment and no inherited file descriptors but one pipe;
- forkpoint holds the pipe's write end (close-on-exec, so no command inherits it) and announces each command
  leader (``L <pid>``) and its end (``D <pid>``); when forkpoint dies, the kernel closes the pipe, and the
  reaper reads end-of-file;
- while commands run, it snapshots forkpoint's subtree every 100 ms (forkpoint is a child subreaper, so
  escaped descendants stay in it); at end-of-file it takes everything it attributes to the runs: the last
  snapshot, every process still in a leader's session or group, every process whose environment carries
  this forkpoint's supervision token prefix, and all of their descendants; it stops them (SIGSTOP, so none
  can fork while the tree is walked), walks again until nothing new appears, then SIGKILLs them all. Each
  pid is checked against its start time before it is signalled.

Under ``--sandbox bwrap`` the same holds, and bwrap adds its own guarantee: ``--die-with-parent`` and
``--unshare-pid`` kill every process of the sandbox when bwrap's parent (forkpoint) dies.

Residual gap: a process that clears its environment, leaves the session *and* is orphaned in the last
100 ms before forkpoint dies is not attributed (cgroups would close it; they are not available to an
unprivileged process everywhere). Where ``sys.executable`` is unusable, no reaper runs: only the
``die_with_parent`` children still die by PDEATHSIG.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable

#: The prefix of every supervision token of this forkpoint process (see ``forkpoint.process``).
INSTANCE = uuid.uuid4().hex[:16]
SUPERVISION_ENV = "FORKPOINT_SUPERVISION_ID"

_SNAPSHOT_S = 0.1
_KILL_ROUNDS_S = 3.0

# ------------------------------------------------------------------------------------------ forkpoint side

_lock = threading.Lock()
_state: dict[str, object] = {}


def start() -> int | None:
    """Start this process's reaper once (again after a fork); its pid, or None where it cannot run."""
    with _lock:
        if _state.get("owner") == os.getpid():
            pid = _state.get("pid")
            return pid if isinstance(pid, int) else None
        _state.clear()
        _state["owner"] = os.getpid()
        if not sys.executable or not os.path.exists(f"/proc/{os.getpid()}/stat"):
            return None
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid()), INSTANCE],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={},
                cwd="/", close_fds=True, start_new_session=True,
            )
        except OSError:
            return None
        assert proc.stdin is not None
        _state["pid"] = proc.pid
        _state["proc"] = proc  # keeps the pipe (and the Popen, so it is not reaped as garbage) alive
        _state["fd"] = proc.stdin.fileno()
        return proc.pid


def pid() -> int | None:
    """The reaper's pid in this process, if it runs (the supervisor must never count it as a run's process)."""
    value = _state.get("pid") if _state.get("owner") == os.getpid() else None
    return value if isinstance(value, int) else None


def _tell(line: str) -> None:
    with _lock:
        fd = _state.get("fd") if _state.get("owner") == os.getpid() else None
        if isinstance(fd, int):
            with contextlib.suppress(OSError):  # the reaper is gone: PDEATHSIG still covers direct children
                os.write(fd, line.encode())


def leader_started(leader: int) -> None:
    _tell(f"L {leader}\n")


def leader_done(leader: int) -> None:
    _tell(f"D {leader}\n")


def cgroup_started(path: str) -> None:
    """A command's pids cgroup (``forkpoint.process.limits``): emptied and removed by the reaper if forkpoint dies."""
    _tell(f"G {path}\n")


def cgroup_done(path: str) -> None:
    _tell(f"E {path}\n")


def die_with_parent_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` that sets PR_SET_PDEATHSIG = SIGKILL in the child (and dies if the parent is gone already).

    prctl is resolved here, in the parent, so the child makes one foreign call and no import before exec.
    """
    with _lock:
        if "prctl" not in _state:
            import ctypes

            try:
                _state["prctl"] = ctypes.CDLL(None, use_errno=True).prctl
            except (OSError, AttributeError):
                _state["prctl"] = None
        prctl = _state["prctl"]
    if not callable(prctl):
        return None
    parent = os.getpid()

    def hook() -> None:
        prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        if os.getppid() != parent:  # the parent died before the prctl: the signal will never come
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


# ------------------------------------------------------------------------------------------ reaper side


def _stat(pid: int) -> tuple[int, int, int, int, str] | None:
    """(ppid, pgid, sid, start time, state) of ``pid``."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return int(fields[1]), int(fields[2]), int(fields[3]), int(fields[19]), fields[0].decode()
    except (IndexError, ValueError):
        return None


def children(pid: int, threads: int = 0) -> list[int]:
    """The children of every thread of ``pid`` (``threads=1``, a single-threaded process: one read, no listdir;
    also used by ``forkpoint.process.tree``)."""
    if threads == 1:
        tids = [str(pid)]
    else:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            return []
    found: list[int] = []
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                found.extend(int(child) for child in handle.read().split())
        except (OSError, ValueError):
            continue
    return found


def _subtree(root: int, skip: int, leaders: dict[int, int]) -> dict[int, int]:
    """Descendants of ``root`` -> start time: not ``skip``, and of ``root``'s own children only the leaders and
    the orphans that appeared since the oldest running leader started (not a host application's other work)."""
    found: dict[int, int] = {}
    oldest = min(leaders.values(), default=0)
    stack = []
    for child in children(root):
        info = _stat(child)
        if child != skip and info is not None and (child in leaders or info[3] >= oldest):
            stack.append(child)
    while stack:
        pid = stack.pop()
        info = _stat(pid)
        if pid in found or info is None:
            continue
        found[pid] = info[3]
        stack.extend(children(pid))
    return found


def _all() -> dict[int, tuple[int, int, int, int, str]]:
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = _stat(int(entry))
            if info is not None:
                table[int(entry)] = info
    return table


def _has_prefix(pid: int, needle: bytes) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            return any(entry.startswith(needle) for entry in handle.read().split(b"\0"))
    except OSError:
        return False


def _signal(pid: int, start: int, sig: int) -> None:
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        info = _stat(pid)
        if info is not None and info[3] == start:
            signal.pidfd_send_signal(pidfd, sig)
    except OSError:
        pass
    finally:
        os.close(pidfd)


def _cleanup(leaders: dict[int, int], known: dict[int, int], needle: bytes, me: int) -> None:
    """Stop everything attributed to the runs, walk until nothing new appears, then kill it all."""
    stopped: dict[int, int] = {}
    give_up = time.monotonic() + _KILL_ROUNDS_S
    while time.monotonic() < give_up:
        table = _all()
        roots = {pid for pid, start in {**leaders, **known}.items() if pid in table and table[pid][3] == start}
        for pid, (_ppid, pgid, sid, start, state) in table.items():
            if pid == me or state in ("Z", "X") or pid in roots:
                continue
            leader = pgid if pgid in leaders else sid
            if (leader in leaders and start >= leaders[leader]) or (pid not in stopped and _has_prefix(pid, needle)):
                roots.add(pid)
        children_of: dict[int, list[int]] = {}
        for pid, info in table.items():
            children_of.setdefault(info[0], []).append(pid)
        members: set[int] = set()
        stack = list(roots)
        while stack:
            pid = stack.pop()
            if pid in members or pid == me or pid not in table:
                continue
            members.add(pid)
            stack.extend(children_of.get(pid, ()))
        new = {pid: table[pid][3] for pid in members if pid not in stopped and table[pid][4] not in ("Z", "X")}
        if not new:
            break
        for pid, start in new.items():
            _signal(pid, start, signal.SIGSTOP)
        stopped.update(new)
    for pid, start in stopped.items():
        _signal(pid, start, signal.SIGKILL)
        _signal(pid, start, signal.SIGCONT)  # SIGKILL wakes a stopped process anyway; harmless otherwise


def _empty_cgroups(paths: set[str], me: int) -> None:
    """Each command cgroup of the dead forkpoint: no fork possible any more (``pids.max`` 0), every member killed
    until none is left, the cgroups removed (the ones below first)."""
    give_up = time.monotonic() + _KILL_ROUNDS_S
    for path in paths:
        with contextlib.suppress(OSError), open(os.path.join(path, "pids.max"), "w") as handle:
            handle.write("0")
    groups = [os.path.join(top, name) for path in paths for top, names, _ in os.walk(path) for name in names]
    groups = sorted(set(groups) | paths, key=len, reverse=True)
    while time.monotonic() < give_up:
        members: dict[int, str] = {}
        for group in groups:
            with contextlib.suppress(OSError, ValueError), open(os.path.join(group, "cgroup.procs")) as handle:
                members.update((int(pid), os.path.basename(group)) for pid in handle.read().split())
        members.pop(me, None)
        if not members:
            break
        for pid, name in members.items():
            _kill_member(pid, name)
        time.sleep(0.01)
    for group in groups:
        while time.monotonic() < give_up + _KILL_ROUNDS_S:
            try:
                os.rmdir(group)
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.01)


def _kill_member(pid: int, group: str) -> None:
    """SIGKILL ``pid`` if it is (still) in the cgroup named ``group``: the pidfd pins the process, and its
    /proc/<pid>/cgroup, read after, proves it is not a process that took over a reused pid."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return
    try:
        with open(f"/proc/{pid}/cgroup", "rb") as handle:
            lines = handle.read().decode("utf-8", "replace").splitlines()
        if any(group in line.rpartition(":")[2].split("/") for line in lines):
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except OSError:
        pass
    finally:
        os.close(pidfd)


def main(argv: list[str]) -> int:
    owner, instance = int(argv[1]), argv[2]
    me = os.getpid()
    needle = f"{SUPERVISION_ENV}={instance}".encode()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    leaders: dict[int, int] = {}
    known: dict[int, int] = {}
    cgroups: set[str] = set()
    ever = False  # no command ever ran: nothing to look for at the end
    buffer = b""
    snapshot = 0.0
    while True:
        wait = max(0.0, snapshot + _SNAPSHOT_S - time.monotonic()) if leaders else None
        ready, _, _ = select.select([0], [], [], wait)
        if ready:
            chunk = os.read(0, 65536)
            if not chunk:
                break
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                kind, _, number = line.decode("utf-8", "replace").partition(" ")
                if kind in ("G", "E"):
                    (cgroups.add if kind == "G" else cgroups.discard)(number)
                    continue
                if not number.isdigit():
                    continue
                if kind == "L":
                    info = _stat(int(number))
                    if info is not None:
                        leaders[int(number)] = info[3]
                        ever = True
                elif kind == "D":
                    leaders.pop(int(number), None)
        if not leaders:
            known = {}
        elif time.monotonic() >= snapshot + _SNAPSHOT_S:
            known = _subtree(owner, me, leaders)
            snapshot = time.monotonic()
    if ever:
        _cleanup(leaders, known, needle, me)
    if cgroups:
        _empty_cgroups(cgroups, me)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
