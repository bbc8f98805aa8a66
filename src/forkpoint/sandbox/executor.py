"""One sandbox per replay for replayed commands: a bwrap started once, and a supervisor inside that runs each command.

Starting bwrap costs ~6-13 ms (namespaces, mounts, the init's exit) against a 2-4 ms local command, so one bwrap per
replayed command kept Claude Code's and Codex's bwrap replays at ~2.5-3x local (docs/sandboxes.md). A
``SandboxExecutor`` starts bwrap once, with the argv a command would get (``Sandbox.confine``: workspace at the
recorded cwd, the replay's HOME and scratch writable, the runtime readable, ``--unshare-net``), running
``executor_inside.py`` on forkpoint's interpreter; each command is then one framed request on a pipe, and the
supervisor inside runs it as a new session leader and kills everything it left (see that module) before it answers.

What the host keeps per command, as ``run_supervised`` does: the deadline (the supervisor's, and the host's own a
little later: a supervisor that does not answer in time is killed with its sandbox and the command fails closed as
an executor error, never re-run elsewhere), bounded output (the same ``Capture`` heads and size-capped ``Log``), the
environment (the caller's, plus the supervision token and bwrap's ``--setenv`` values, as bwrap gave them), the
cwd, the exit code (a signal as ``128 + N``, as bwrap reported it). Every frame from the sandbox is read bounded
(kind + length header, 64 KiB per output chunk, 4 KiB per control frame); anything else ends the executor.

The process limit: the executor (bwrap, its init, the supervisor and the one command running) is in one pids cgroup
of ``--max-processes`` + 3 (``forkpoint.process.limits``), so each command gets the same cap as before; the cgroup
is checked after every command (only those three may remain, else the executor is ended: fail closed), and the
cgroup's ``max`` events count a command at its limit. Where no cgroup can be made, the fallback of ``limits`` holds
for the whole executor (``RLIMIT_NPROC`` on bwrap, inherited by everything inside).

Shared between one replay's commands, as on the recording's machine where Claude Code and Codex ran every command
of a session on one host: ``/tmp`` and ``/var/tmp``, the private loopback, the IPC namespace, the PID namespace (empty
between commands but for live process sessions). Nothing is shared between executors: each replay, branch and
continuation gets its own.

Codex's process sessions (``SandboxSession``, the interface of ``process.session.LiveProcess``) run in the same
sandbox: started, pumped (in 20 ms slices), written to and killed by id through the same pipe; the supervisor spares
their processes when other commands end.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process import limits, reaper
from forkpoint.process.capture import Capture, Log
from forkpoint.process.session import _Pending
from forkpoint.process.supervise import DEFAULT_MAX_LOG_BYTES, DEFAULT_MAX_OUTPUT_BYTES, ProcessResult, _child_setup
from forkpoint.process.tree import SUPERVISION_ENV, spawn_leader, unregister_leader

if TYPE_CHECKING:
    from forkpoint.sandbox.base import Sandbox

#: the in-sandbox half (a script file: it runs under the sandbox's view of the file system)
EXECUTOR_INSIDE = Path(__file__).with_name("executor_inside.py")
#: ``per-command`` turns the executor off (one bwrap per command, as before; for comparisons)
MODE_ENV = "FORKPOINT_SANDBOX_EXECUTOR"
_MAX_CHUNK = 64 * 1024
_MAX_CONTROL = 4096
_HEADER = 5
_START_TIMEOUT_S = 60.0  # a loaded machine (issue 27)
_ANSWER_SLACK_S = 10.0  # the supervisor's SIGTERM grace, SIGKILL rounds and pipe drain, on a loaded machine
_CLOSE_WAIT_S = 3.0
_RESIDENTS = 3  # bwrap, its PID-namespace init, the supervisor
#: ``run_supervised`` options the executor reproduces; anything else takes the per-command path
_SUPPORTED = frozenset({"merge_stderr", "log_path", "max_output_bytes", "max_log_bytes", "grace_s", "pipe_grace_s"})


class CommandExecutor:
    """Runs one replay's commands in the sandbox; the base starts each in its own (``Sandbox.run``)."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def run(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], timeout_s: float, network: bool = False,
            writable: Sequence[Path] = (), readable: Sequence[Path] = (), **options: Any) -> ProcessResult:
        return self.sandbox.run(argv, cwd=cwd, env=env, timeout_s=timeout_s, network=network, writable=writable,
                                readable=readable, **options)

    def close(self) -> None:
        """End what the executor keeps (nothing here)."""


def _interpreter_paths() -> tuple[Path, ...]:
    from forkpoint.sandbox import interpreter_paths

    executable = Path(os.path.realpath(sys.executable))
    return tuple(dict.fromkeys((*interpreter_paths(Path(sys.executable)), Path(os.path.realpath(sys.base_prefix)),
                                executable.parent, EXECUTOR_INSIDE.parent)))


class SandboxExecutor(CommandExecutor):
    """One bwrap for the commands of one replay (module docstring); started at the first command, ended by ``close``
    (or by a failure, after which the next command starts a fresh one)."""

    def __init__(self, sandbox: Sandbox, *, max_processes: int | None = None) -> None:
        super().__init__(sandbox)
        self.max_processes = max_processes
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._limit: limits.CommandLimit | None = None
        self._requests = -1
        self._replies = -1
        self._buffer = bytearray()
        self._writable: frozenset[str] = frozenset()
        self._readable: frozenset[str] = frozenset()
        self._setenv: dict[str, str] = {}
        self._events = 0
        self._absent: frozenset[str] = frozenset()  # readable paths missing at the start (``--ro-bind-try`` skipped)
        self._sessions = 0
        self._open_sessions: list[SandboxSession] = []

    # ------------------------------------------------------------------ commands

    def run(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], timeout_s: float, network: bool = False,
            writable: Sequence[Path] = (), readable: Sequence[Path] = (), **options: Any) -> ProcessResult:
        if not argv:
            raise ValueError("argv must not be empty")
        if network or not set(options) <= _SUPPORTED or (
            self._proc is not None and not self._covers(writable, readable)
        ):
            return super().run(argv, cwd=cwd, env=env, timeout_s=timeout_s, network=network, writable=writable,
                               readable=readable, **options)
        if self._proc is None:
            self._start(writable, readable)
        max_output = int(options.get("max_output_bytes", DEFAULT_MAX_OUTPUT_BYTES))
        grace_s = float(options.get("grace_s", 0.25))
        if timeout_s <= 0 or grace_s < 0 or max_output < 0:
            raise ValueError("timeouts and limits must be positive")
        log_path = options.get("log_path")
        log = Log(Path(log_path), int(options.get("max_log_bytes", DEFAULT_MAX_LOG_BYTES))) if log_path else None
        child_env = dict(env)
        child_env[SUPERVISION_ENV] = reaper.INSTANCE + uuid.uuid4().hex[:16]
        child_env.update(self._setenv)
        # a host program (SWE-agent's and Codex's pty helper on forkpoint's interpreter) on the host's loader in an
        # image root, as ``confine`` does for a bwrap of its own; the image's programs unchanged
        request = {"argv": self.sandbox.host_command(argv), "cwd": cwd, "env": child_env, "timeout_s": timeout_s,
                   "grace_s": grace_s, "merge_stderr": bool(options.get("merge_stderr"))}
        started = time.monotonic()
        try:
            outcome, out, err = self._exchange(request, started + timeout_s + grace_s + _ANSWER_SLACK_S,
                                               max_output, log)
        except BaseException:
            self._end()
            raise
        finally:
            if log is not None:
                log.close()
        hit = self._count_limit()
        left = self._survivors()
        return ProcessResult(
            returncode=outcome["returncode"],
            stdout=bytes(out.data),
            stderr=bytes(err.data),
            stdout_truncated=out.truncated,
            stderr_truncated=err.truncated,
            timed_out=outcome["timed_out"],
            background_cleanup=outcome["background_cleanup"] or left,
            duration_s=time.monotonic() - started,
            log_truncated=log.truncated if log is not None else False,
            process_limit_hit=hit,
        )

    def _covers(self, writable: Sequence[Path], readable: Sequence[Path]) -> bool:
        want_w = {str(path) for path in writable}
        want_r = {str(path) for path in readable}
        if want_r & self._absent and any(os.path.exists(path) for path in want_r & self._absent):
            return False  # made since the start: not in this sandbox (a command of its own shows it)
        return want_w <= self._writable and want_r <= self._readable | self._writable

    def _exchange(self, request: dict[str, Any], deadline: float, max_output: int,
                  log: Log | None) -> tuple[dict[str, Any], Capture, Capture]:
        out, err = Capture(max_output), Capture(max_output)

        def sink(kind: bytes, body: bytes) -> None:
            (out if kind == b"o" else err).feed(body)
            if log is not None:
                log.write(body)

        outcome = self._call(request, deadline, sink)
        if not (isinstance(outcome.get("returncode"), int) and isinstance(outcome.get("timed_out"), bool)
                and isinstance(outcome.get("background_cleanup"), bool)):
            raise self._failure("a malformed reply")
        return outcome, out, err

    def _call(self, request: dict[str, Any], deadline: float, sink: Callable[[bytes, bytes], None]) -> dict[str, Any]:
        """One request and its reply: output frames go to ``sink`` until the end frame (a JSON object)."""
        payload = json.dumps(request).encode()
        self._write(struct.pack(">I", len(payload)) + payload, deadline)
        while True:
            kind, body = self._frame(deadline)
            if kind in (b"o", b"e"):
                sink(kind, body)
                continue
            try:
                outcome = json.loads(body)
            except ValueError:
                outcome = None
            if kind != b"x" or not isinstance(outcome, dict):
                raise self._failure("a malformed reply")
            return outcome

    # ------------------------------------------------------------------ process sessions

    def start_session(self, argv: Sequence[str], *, cwd: str, env: Mapping[str, str], stdin: bool,
                      writable: Sequence[Path], readable: Sequence[Path], max_pending_bytes: int) -> SandboxSession:
        """A process left running between calls (Codex's process sessions) in this sandbox: it shares the replay's
        ``/tmp``, and its processes are not killed when other commands end (only when it ends or is killed)."""
        if self._proc is not None and not self._covers(writable, readable):
            self._end()  # a sandbox without what the session needs: the next one has it
        if self._proc is None:
            self._start(writable, readable)
        self._sessions += 1
        session = SandboxSession(self, self._sessions, stdin, max_pending_bytes)
        self._open_sessions = [known for known in self._open_sessions if not known.exited] + [session]
        child_env = dict(env)
        child_env[SUPERVISION_ENV] = reaper.INSTANCE + uuid.uuid4().hex[:16]
        child_env.update(self._setenv)
        session.request({"op": "start", "id": session.key, "argv": list(argv), "cwd": cwd, "env": child_env,
                         "stdin": stdin}, _START_TIMEOUT_S)
        return session

    def _live_sessions(self) -> bool:
        return any(not session.exited for session in self._open_sessions if session.generation == self.starts)

    @property
    def generation(self) -> int:
        """Which sandbox is running (a session of an earlier one has ended with it)."""
        return self.starts

    def _write(self, data: bytes, deadline: float) -> None:
        view = memoryview(data)
        with selectors.DefaultSelector() as selector:
            selector.register(self._requests, selectors.EVENT_WRITE)
            while view:
                if not selector.select(max(deadline - time.monotonic(), 0.0)):
                    raise self._failure("no answer before the deadline")
                try:
                    view = view[os.write(self._requests, view):]
                except BlockingIOError:
                    continue
                except OSError as exc:
                    raise self._failure(f"its request pipe failed ({exc.strerror})") from None

    def _frame(self, deadline: float) -> tuple[bytes, bytes]:
        """The next frame from the sandbox, read bounded (a header first; a length over the kind's bound, an unknown
        kind, the end of the pipe or the deadline end the executor)."""
        with selectors.DefaultSelector() as selector:
            selector.register(self._replies, selectors.EVENT_READ)
            while True:
                if len(self._buffer) >= _HEADER:
                    kind = bytes(self._buffer[:1])
                    (length,) = struct.unpack(">I", self._buffer[1:_HEADER])
                    bound = _MAX_CHUNK if kind in (b"o", b"e") else _MAX_CONTROL if kind in (b"x", b"h") else -1
                    if length > bound:
                        raise self._failure("a malformed reply")
                    if len(self._buffer) >= _HEADER + length:
                        body = bytes(self._buffer[_HEADER:_HEADER + length])
                        del self._buffer[:_HEADER + length]
                        return kind, body
                if not selector.select(max(deadline - time.monotonic(), 0.0)):
                    raise self._failure("no answer before the deadline")
                try:
                    chunk = os.read(self._replies, _MAX_CHUNK + _HEADER)
                except BlockingIOError:
                    continue
                if not chunk:
                    raise self._failure("it ended")
                self._buffer += chunk

    def _failure(self, what: str) -> ReplayError:
        return ReplayError(ErrorKind.EXECUTOR, f"the sandbox's command executor failed: {what}; the command's outcome "
                                               "is unknown and it is not run anywhere else")

    def _count_limit(self) -> bool:
        """Whether this command reached the process limit (the cgroup's ``max`` events went up); counted for the run."""
        if self._limit is None:
            limits.count_command(False)
            return False
        events = self._limit.max_events()
        hit = events > self._events
        self._events = events
        limits.count_command(hit)
        return hit

    def _survivors(self) -> bool:
        """Anything of the command still in the executor's cgroup (only bwrap, its init and the supervisor may
        be): the executor is ended, so nothing survives (fail closed); the next command gets a fresh one."""
        if self._limit is None or self._live_sessions() or len(self._limit.members()) <= _RESIDENTS:
            return False  # (a live process session's processes are in the cgroup too: the supervisor's rule only)
        self._end()
        return True

    # ------------------------------------------------------------------ the sandbox

    def _start(self, writable: Sequence[Path], readable: Sequence[Path]) -> None:
        extra = _interpreter_paths()
        readable = tuple(dict.fromkeys((*readable, *extra)))
        requests_in, self._requests = os.pipe2(os.O_CLOEXEC)
        self._replies, replies_out = os.pipe2(os.O_CLOEXEC)
        os.set_blocking(self._requests, False)
        os.set_blocking(self._replies, False)
        python = os.path.realpath(sys.executable)
        inside = [python, "-I", "-S", str(EXECUTOR_INSIDE), str(requests_in), str(replies_out)]
        command, host_cwd = self.sandbox.confine(inside, self.sandbox.cwd, network=False, writable=writable,
                                                 readable=readable)
        self._setenv = _setenv(command)
        self._setenv.pop(SUPERVISION_ENV, None)
        token = reaper.INSTANCE + uuid.uuid4().hex[:16]
        env = {"PATH": os.defpath, "LANG": "C.UTF-8", SUPERVISION_ENV: token}
        maximum = limits.run_max_processes() if self.max_processes is None else self.max_processes
        reaper.start()
        self._limit = limits.open_limit(maximum + _RESIDENTS)
        nproc = limits.nproc_fallback(maximum + _RESIDENTS) if self._limit is None else None
        if self._limit is not None:
            reaper.cgroup_started(str(self._limit.path))
        limit = self._limit
        try:
            self._proc = spawn_leader(lambda: _enter(limit, lambda: subprocess.Popen(
                command, cwd=host_cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, start_new_session=True, close_fds=True, pass_fds=(requests_in, replies_out),
                preexec_fn=_child_setup(True, False, nproc),
            )))
        except OSError as exc:
            self._end()
            raise ReplayError(ErrorKind.EXECUTOR, f"start the sandbox's command executor: {exc.strerror or exc}") \
                from exc
        finally:
            os.close(requests_in)
            os.close(replies_out)
        reaper.leader_started(self._proc.pid)
        self.starts += 1
        self._writable = frozenset(str(path) for path in writable)
        self._readable = frozenset(str(path) for path in readable)
        self._absent = frozenset(path for path in self._readable if not os.path.exists(path))
        try:
            kind, _ = self._frame(time.monotonic() + _START_TIMEOUT_S)
            if kind != b"h":
                raise self._failure("a malformed hello")
        except ReplayError as exc:
            detail = self._stderr()
            self._end()
            raise ReplayError(ErrorKind.EXECUTOR, f"{exc.message}" + (f" (bwrap: {detail})" if detail else "")) \
                from None
        assert self._proc.stderr is not None
        self._proc.stderr.close()  # only the start's errors are read (bounded); later writes to it fail
        self._events = self._limit.max_events() if self._limit is not None else 0

    def _stderr(self) -> str:
        """bwrap's own error at a failed start (bounded; it has ended or is being ended)."""
        if self._proc is None or self._proc.stderr is None or self._proc.stderr.closed:
            return ""
        fd = self._proc.stderr.fileno()
        os.set_blocking(fd, False)
        with contextlib.suppress(OSError):
            return os.read(fd, 4096).decode("utf-8", "replace").strip()[-500:]
        return ""

    def _end(self) -> None:
        """End the executor: its sandbox, everything in it, its cgroup (idempotent)."""
        for fd in (self._requests, self._replies):
            if fd >= 0:
                os.close(fd)
        self._requests = self._replies = -1
        self._buffer.clear()
        proc, self._proc = self._proc, None
        limit, self._limit = self._limit, None
        if proc is not None:
            try:
                proc.wait(timeout=_CLOSE_WAIT_S)  # the request pipe's end lets the supervisor exit, and bwrap with it
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=_CLOSE_WAIT_S)
            if proc.stderr is not None:
                proc.stderr.close()
        try:
            if limit is not None:
                limit.close(proc.pid if proc is not None else 0)
                reaper.cgroup_done(str(limit.path))
        finally:
            if proc is not None:
                unregister_leader(proc.pid)
                reaper.leader_done(proc.pid)

    def close(self) -> None:
        if self._proc is not None or self._limit is not None:
            self._end()


class SandboxSession:
    """``process.session.LiveProcess``'s interface for a process session run by the executor's supervisor: started
    once, pumped, written to and killed across calls; its output kept bounded (the rest counted, not kept)."""

    def __init__(self, executor: SandboxExecutor, key: int, stdin: bool, max_pending_bytes: int) -> None:
        self.executor = executor
        self.key = key
        self.generation = executor.generation
        self.has_stdin = stdin
        self.pending = _Pending(max_pending_bytes)
        self.returncode: int | None = None
        self.background_cleanup = False
        self._done = False

    def _feed(self, _kind: bytes, chunk: bytes) -> None:
        self.pending.output("stdout", chunk)

    def request(self, request: dict[str, Any], wait_s: float) -> dict[str, Any]:
        if self._done:
            return {"exited": True}
        if self.generation != self.executor.generation or self.executor._proc is None:
            self._done, self.returncode = True, -1  # its sandbox has ended (and it with it)
            return {"exited": True}
        try:
            state = self.executor._call(request, time.monotonic() + wait_s + _ANSWER_SLACK_S, self._feed)
        except BaseException:
            self.executor._end()
            raise
        if state.get("exited") is True:
            self._done = True
            code = state.get("returncode")
            self.returncode = code if isinstance(code, int) else -1
            self.background_cleanup = state.get("background_cleanup") is True
        return state

    @property
    def exited(self) -> bool:
        return self._done

    def pump(self, until: float, done: Callable[[], bool]) -> None:
        """Drain output until ``done()``, the leader's exit or ``until`` (monotonic), in short slices."""
        while not self._done and not done():
            remaining = until - time.monotonic()
            if remaining <= 0:
                return
            self.request({"op": "pump", "id": self.key, "timeout_s": min(remaining, 0.02)}, min(remaining, 0.02))

    def write(self, data: bytes, until: float | None = None) -> bool:
        if self._done or not self.has_stdin:
            return False
        wait = max((time.monotonic() + 10.0 if until is None else until) - time.monotonic(), 0.0)
        state = self.request({"op": "write", "id": self.key, "data": data.hex(), "timeout_s": wait}, wait)
        return state.get("written") is True

    def take(self) -> tuple[bytes, int]:
        data, dropped = bytes(self.pending.data), self.pending.dropped
        self.pending.data.clear()
        self.pending.dropped = 0
        return data, dropped

    def kill(self) -> None:
        """End the session now (idempotent): the process and everything it started."""
        if not self._done:
            self.request({"op": "kill", "id": self.key}, 5.0)
            self._done = True


def _setenv(command: Sequence[str]) -> dict[str, str]:
    """bwrap's ``--setenv NAME VALUE`` pairs (before ``--``): what it put in a command's environment."""
    found: dict[str, str] = {}
    index = 0
    while index < len(command) and command[index] != "--":
        if command[index] == "--setenv" and index + 2 < len(command):
            found[command[index + 1]] = command[index + 2]
            index += 3
        else:
            index += 1
    return found


def _enter(limit: limits.CommandLimit | None,
           start: Any) -> subprocess.Popen[bytes]:
    """Start bwrap inside the executor's cgroup (only this thread enters it, for the spawn)."""
    if limit is None or not limit.enter():
        return start()  # type: ignore[no-any-return]
    try:
        return start()  # type: ignore[no-any-return]
    finally:
        limit.leave()
