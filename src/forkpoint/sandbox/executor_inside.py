"""Inside one replay's sandbox: run the replayed commands one at a time, on request, and leave nothing of each behind.

Run as ``python -I -S executor_inside.py REQUEST_FD REPLY_FD`` by ``forkpoint.sandbox.executor`` as the first (and
only) child of bwrap's PID-namespace init (stdlib only: forkpoint's interpreter, bound read-only). The two pipes are
extra descriptors, not stdio: bwrap's init closes every other descriptor but keeps its stdio, and a command could
reach the init's descriptors through ``/proc/1/fd``. This process makes itself non-dumpable first, so with every
capability dropped no command can open its ``/proc/<pid>/fd`` (the pipes), read its memory or ptrace it; a command
can still signal it, which ends the sandbox (bwrap's init exits with its first child): the host then fails the
command closed.

Requests (host -> here): 4-byte big-endian length + JSON ``{"argv", "cwd", "env", "timeout_s", "grace_s",
"merge_stderr"}`` (a command run to its end), or ``{"op": "start" | "pump" | "write" | "kill", "id", ...}`` for a
process session (Codex's exec_command left running: ``_Session``; its processes are spared when commands end).
Replies (here -> host): 1-byte kind + 4-byte length + payload; ``o`` / ``e`` output chunks
(at most 64 KiB each), ``x`` the end of the command as JSON, ``h`` the hello. The host reads every frame bounded.

Per command: the command starts as a new session leader (stdin /dev/null, its own pipes, no other descriptor);
its output is forwarded as it comes. When it exits, everything else still alive in the namespace except the init
and this process is killed at once (as bwrap's init killed the namespace when one bwrap ran one command); at the
deadline, SIGTERM to all of them, the grace, then SIGKILL until none is left. This process is the namespace's
child subreaper, so every orphan (setsid, double fork) is re-parented here and reaped. Commands run one at a time,
so "all of them" is exactly the command's processes; the reply comes only once ``/proc`` shows none alive.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import struct
import subprocess
import sys
import time

_CHUNK = 65536
_MAX_REQUEST = 64 * 1024 * 1024
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option})")


def _read_exact(fd: int, count: int) -> bytes:
    data = bytearray()
    while len(data) < count:
        chunk = os.read(fd, count - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return bytes(data)


def _send(fd: int, kind: bytes, payload: bytes) -> None:
    view = memoryview(kind + struct.pack(">I", len(payload)) + payload)
    while view:
        view = view[os.write(fd, view):]


def _scan(me: int, keep: set[int]) -> dict[int, tuple[int, int]]:
    """Live processes of the namespace other than its init and this one, as pid -> (ppid, session id); zombie
    children are reaped on the way, except those in ``keep`` (leaders whose ``Popen`` reaps them, for the status)."""
    found: dict[int, tuple[int, int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or name in ("1", str(me)):
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        pid = int(name)
        if len(fields) < 4:
            continue
        if fields[0] not in (b"Z", b"X"):
            found[pid] = (int(fields[1]), int(fields[3]))
        elif pid not in keep and int(fields[1]) == me:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
    return found


def _owned(processes: dict[int, tuple[int, int]], roots: set[int]) -> set[int]:
    """The processes of the sessions led by ``roots``: in one of their sessions, or descended from a leader."""
    owned = set()
    for pid, (ppid, sid) in processes.items():
        if pid in roots or sid in roots:
            owned.add(pid)
            continue
        seen = 0
        while ppid in processes and seen < 4096:
            if ppid in roots:
                owned.add(pid)
                break
            ppid = processes[ppid][0]
            seen += 1
    return owned


#: the live process sessions (Codex's exec_command left running), by the host's id: their processes are theirs
SESSIONS: dict[int, _Session] = {}


def _others(me: int, leader: int) -> list[int]:
    """Live processes that belong to no live process session (the running command's, and any leftovers)."""
    roots = {session.proc.pid for session in SESSIONS.values() if not session.done}
    processes = _scan(me, {leader} | roots)
    owned = _owned(processes, roots) if roots else set()
    return [pid for pid in processes if pid not in owned]


def _signal_all(pids: list[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)


class _Command:
    def __init__(self, request: dict[str, object], reply: int) -> None:
        self.reply = reply
        self.me = os.getpid()
        merge = bool(request.get("merge_stderr"))
        self.proc = subprocess.Popen(
            list(request["argv"]),  # type: ignore[call-overload]
            cwd=str(request["cwd"]), env=dict(request["env"]),  # type: ignore[call-overload]
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge else subprocess.PIPE,
            start_new_session=True, close_fds=True,
        )
        self.pipes: dict[int, bytes] = {}
        for pipe, kind in ((self.proc.stdout, b"o"), (self.proc.stderr, b"e")):
            if pipe is not None:
                self.pipes[pipe.fileno()] = kind
        self.exit_fd = os.pidfd_open(self.proc.pid)

    def pump(self, timeout: float) -> None:
        """Forward what the pipes hold (waiting at most ``timeout`` for something to happen)."""
        fds = [*self.pipes, *([self.exit_fd] if self.exit_fd >= 0 else [])]
        if not fds:
            time.sleep(timeout)
            return
        ready, _, _ = select.select(fds, [], [], max(timeout, 0.0))
        for fd in ready:
            if fd == self.exit_fd:
                continue
            chunk = os.read(fd, _CHUNK)
            if chunk:
                _send(self.reply, self.pipes[fd], chunk)
            else:
                del self.pipes[fd]

    def run(self, timeout_s: float, grace_s: float) -> dict[str, object]:
        deadline = time.monotonic() + timeout_s
        timed_out = False
        while self.proc.poll() is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                timed_out = True
                break
            self.pump(min(remaining, 0.5))
        leader = self.proc.pid
        background = False
        if timed_out:
            others = [pid for pid in _others(self.me, leader) if pid != leader]
            background = bool(others)
            _signal_all([leader, *others], signal.SIGTERM)
            until = time.monotonic() + grace_s
            while time.monotonic() < until and (self.proc.poll() is None or _others(self.me, leader)):
                self.pump(0.005)
        os.close(self.exit_fd)
        self.exit_fd = -1
        wait = 0.0005
        while True:  # the leader has exited (or is being killed): nothing of the command may stay
            left = [pid for pid in _others(self.me, leader) if pid != leader]
            if self.proc.poll() is None:
                left.append(leader)
            if not left:
                break
            background = background or any(pid != leader for pid in left)
            _signal_all(left, signal.SIGKILL)
            self.pump(wait)
            wait = min(wait * 2, 0.02)
        give_up = time.monotonic() + 3.0
        while self.pipes and time.monotonic() < give_up:  # every writer is gone: the pipes end
            self.pump(0.5)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        code = self.proc.wait()
        if code < 0:  # a signal, as bwrap's init reported it when it ran the command
            code = 128 - code
        return {"returncode": code, "timed_out": timed_out, "background_cleanup": background}


class _Session:
    """A process left running between requests (Codex's unified exec process session): started, pumped, written to
    and killed by id; its processes (its session, its descendants) are not killed at the end of other commands."""

    def __init__(self, request: dict[str, object], reply: int) -> None:
        self.reply = reply
        self.me = os.getpid()
        self.proc = subprocess.Popen(
            list(request["argv"]),  # type: ignore[call-overload]
            cwd=str(request["cwd"]), env=dict(request["env"]),  # type: ignore[call-overload]
            stdin=subprocess.PIPE if request.get("stdin") else subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
        )
        assert self.proc.stdout is not None
        self.out: int | None = self.proc.stdout.fileno()
        os.set_blocking(self.out, False)
        if self.proc.stdin is not None:
            os.set_blocking(self.proc.stdin.fileno(), False)
        self.exit_fd = os.pidfd_open(self.proc.pid)
        self.done = False
        self.returncode: int | None = None
        self.background = False

    def _read(self, timeout: float) -> None:
        fds = [fd for fd in (self.out, self.exit_fd) if fd is not None and fd >= 0]
        ready, _, _ = select.select(fds, [], [], max(timeout, 0.0))
        if self.out is not None and self.out in ready:
            try:
                chunk = os.read(self.out, _CHUNK)
            except BlockingIOError:
                return
            if chunk:
                _send(self.reply, b"o", chunk)
            else:
                self.out = None

    def _mine(self) -> list[int]:
        processes = _scan(self.me, {self.proc.pid})
        return sorted(_owned(processes, {self.proc.pid}))

    def _finish(self, sig: int | None = None) -> None:
        """End the session: ``sig`` (SIGTERM, then the grace) first when it is killed, then SIGKILL until nothing of
        it is left; drain its output; reap the leader."""
        if self.done:
            return
        if sig is not None:
            _signal_all(self._mine(), sig)
            until = time.monotonic() + 0.25
            while time.monotonic() < until and self._mine():
                self._read(0.005)
        wait = 0.0005
        while True:
            left = self._mine()
            if self.proc.poll() is None and self.proc.pid not in left:
                left.append(self.proc.pid)
            if not left:
                break
            self.background = self.background or any(pid != self.proc.pid for pid in left)
            _signal_all(left, signal.SIGKILL)
            self._read(wait)
            wait = min(wait * 2, 0.02)
        give_up = time.monotonic() + 3.0
        while self.out is not None and time.monotonic() < give_up:
            self._read(0.5)
        os.close(self.exit_fd)
        self.exit_fd = -1
        for pipe in (self.proc.stdout, self.proc.stdin):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        code = self.proc.wait()
        self.returncode = 128 - code if code < 0 else code
        self.done = True

    def state(self) -> dict[str, object]:
        return {"exited": self.done, "returncode": self.returncode, "background_cleanup": self.background}

    def pump(self, timeout_s: float) -> dict[str, object]:
        until = time.monotonic() + timeout_s
        while not self.done:
            if self.proc.poll() is not None:
                self._finish()
                break
            remaining = until - time.monotonic()
            if remaining <= 0:
                break
            self._read(remaining)
        return self.state()

    def write(self, data: bytes, timeout_s: float) -> bool:
        stdin = self.proc.stdin
        if self.done or stdin is None or stdin.closed:
            return False
        until = time.monotonic() + timeout_s
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(stdin.fileno(), view[:_CHUNK]):]
            except BlockingIOError:
                if time.monotonic() >= until or self.proc.poll() is not None:
                    return False
                self._read(0.02)
            except OSError:
                return False
        return True


def _spawn_failure(request: dict[str, object], exc: OSError) -> dict[str, object]:
    """What bwrap printed when it could not start one command (``bwrap: execvp ...``), as an exit 1."""
    if exc.filename is not None and exc.filename == request.get("cwd"):
        text = f"bwrap: Can't chdir to {request['cwd']}: {exc.strerror}\n"
    else:
        argv = request["argv"]
        text = f"bwrap: execvp {argv[0] if isinstance(argv, list) and argv else ''}: {exc.strerror}\n"
    return {"returncode": 1, "timed_out": False, "background_cleanup": False, "spawn_error": text}


def main(argv: list[str]) -> int:
    _prctl(_PR_SET_DUMPABLE, 0)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    requests, reply = int(argv[1]), int(argv[2])
    for fd in (requests, reply):
        os.set_inheritable(fd, False)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    _send(reply, b"h", json.dumps({"pid": os.getpid()}).encode())
    while True:
        try:
            (length,) = struct.unpack(">I", _read_exact(requests, 4))
            if length > _MAX_REQUEST:
                return 2
            request = json.loads(_read_exact(requests, length))
        except EOFError:
            return 0
        op = request.get("op", "run")
        if op == "run":
            _send(reply, b"x", json.dumps(_run(request, reply)).encode())
        else:
            _send(reply, b"x", json.dumps(_session_op(op, request, reply)).encode())


def _run(request: dict[str, object], reply: int) -> dict[str, object]:
    try:
        command = _Command(request, reply)
    except OSError as exc:
        outcome = _spawn_failure(request, exc)
        _send(reply, b"o" if request.get("merge_stderr") else b"e", str(outcome.pop("spawn_error")).encode())
        return outcome
    return command.run(float(request["timeout_s"]), float(request.get("grace_s", 0.25)))  # type: ignore[arg-type]


def _session_op(op: object, request: dict[str, object], reply: int) -> dict[str, object]:
    key = int(request["id"])  # type: ignore[call-overload]
    if op == "start":
        try:
            SESSIONS[key] = _Session(request, reply)
        except OSError as exc:
            failure = _spawn_failure(request, exc)
            _send(reply, b"o", str(failure["spawn_error"]).encode())
            return {"exited": True, "returncode": 1, "background_cleanup": False}
        return SESSIONS[key].state()
    session = SESSIONS.get(key)
    if session is None:
        return {"exited": True, "returncode": None, "background_cleanup": False, "unknown": True}
    if op == "pump":
        state = session.pump(float(request["timeout_s"]))  # type: ignore[arg-type]
    elif op == "write":
        written = session.write(bytes.fromhex(str(request["data"])), float(request["timeout_s"]))  # type: ignore[arg-type]
        state = {**session.state(), "written": written}
    else:  # kill
        session._finish(signal.SIGTERM)
        state = session.state()
    if session.done:
        del SESSIONS[key]
    return state

if __name__ == "__main__":
    sys.exit(main(sys.argv))
