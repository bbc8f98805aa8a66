"""Inside one replay's sandbox: run the replayed commands one at a time, on request, and leave nothing of each behind.

Run as ``python -I -S executor_inside.py REQUEST_FD REPLY_FD`` by ``forkpoint.sandbox.executor`` as the first (and
only) child of bwrap's PID-namespace init (stdlib only: forkpoint's interpreter, bound read-only). The two pipes are
extra descriptors, not stdio: bwrap's init closes every other descriptor but keeps its stdio, and a command could
reach the init's descriptors through ``/proc/1/fd``. This process makes itself non-dumpable first, so with every
capability dropped no command can open its ``/proc/<pid>/fd`` (the pipes), read its memory or ptrace it; a command
can still signal it, which ends the sandbox (bwrap's init exits with its first child): the host then fails the
command closed.

Requests (host -> here): 4-byte big-endian length + JSON ``{"argv", "cwd", "env", "timeout_s", "grace_s",
"merge_stderr"}``. Replies (here -> host): 1-byte kind + 4-byte length + payload; ``o`` / ``e`` output chunks
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


def _others(me: int, leader: int) -> list[int]:
    """Live processes of the namespace other than its init and this one; zombie children are reaped on the way,
    except the leader (its ``Popen`` reaps it, keeping its exit status)."""
    found = []
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
        if fields[:1] not in ([b"Z"], [b"X"]):
            found.append(pid)
        elif pid != leader and fields[1:2] == [str(me).encode()]:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)
    return found


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
        try:
            command = _Command(request, reply)
        except OSError as exc:
            outcome = _spawn_failure(request, exc)
            _send(reply, b"o" if request.get("merge_stderr") else b"e", str(outcome.pop("spawn_error")).encode())
        else:
            outcome = command.run(float(request["timeout_s"]), float(request.get("grace_s", 0.25)))
        _send(reply, b"x", json.dumps(outcome).encode())


if __name__ == "__main__":
    sys.exit(main(sys.argv))
