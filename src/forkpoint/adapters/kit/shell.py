"""The one runner of replayed shell commands, shared by every adapter that re-executes a command line.

A ``CommandSpec`` says what to run, where, with which environment, for how long and how much output to keep;
``run_command`` runs it inside the run's sandbox with the network off (``forkpoint.process`` supervision: deadline,
no surviving descendants), stdout and stderr merged in write order and stdin /dev/null (with ``tty``, a fresh 24x80
pseudo-terminal nobody types into). The full stream goes to a log in the caller's scratch dir, so the head and
the tail of a long output are both kept while memory stays bounded. Adapters build specs and format the
``CommandOutput`` in their agent's words; nothing else here knows an agent.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.core.errors import ErrorKind
from forkpoint.core.fs import open_regular_strict, refused_as
from forkpoint.sandbox import local_sandbox

if TYPE_CHECKING:
    from forkpoint.sandbox.base import Sandbox
    from forkpoint.sandbox.executor import CommandExecutor


@dataclass(frozen=True)
class CommandSpec:
    """One command to run: the process, where, with what, for how long, and how much output to keep."""

    argv: tuple[str, ...]
    cwd: Path  # as the command sees it (under bwrap: below the recorded cwd)
    env: Mapping[str, str]
    timeout_s: float
    keep_head: int  # bytes kept from the start of the merged stdout+stderr stream
    keep_tail: int  # bytes kept from its end (when the stream is longer than head + tail)
    tty: bool = False  # run on a pseudo-terminal (24x80) instead of pipes


@dataclass(frozen=True)
class CommandOutput:
    returncode: int | None  # the exit code, 128 + N for signal N; None when it ran past the deadline
    head: bytes
    tail: bytes
    total_bytes: int
    wall_time_s: float
    background_cleanup: bool
    capture_incomplete: bool = False  # more output than forkpoint's log could hold: the tail may be wrong


#: Runs argv[1:] on a new pseudo-terminal (its stdin, stdout and stderr) and copies what it prints to stdout.
#: Nothing is ever typed into it (a replayed Codex ``tty: true`` command, a SWE-agent action on its terminal).
_PTY_HELPER = """
import fcntl, os, pty, struct, sys, termios
pid, fd = pty.fork()
if pid == 0:
    fcntl.ioctl(0, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    try:
        os.execv(sys.argv[1], sys.argv[1:])
    except OSError:
        os._exit(127)
while True:
    try:
        data = os.read(fd, 65536)
    except OSError:
        break
    if not data:
        break
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()
code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
os._exit(code if code >= 0 else 128 - code)
"""


@dataclass(frozen=True)
class Runner:
    """Where commands run: the run's sandbox (network off), and the host paths they need besides the workspace."""

    sandbox: Sandbox
    writable: tuple[Path, ...] = ()  # e.g. the agent HOME, a scratch dir the command writes its state to
    readable: tuple[Path, ...] = ()  # e.g. a runtime's helper binaries (Codex's bundled rg)
    #: the replay's executor (``Sandbox.executor``: one bwrap for all of the replay's commands); None: one each
    executor: CommandExecutor | None = None


def _python_install() -> Path:
    """The Python install the tty helper runs on (made readable inside a sandbox that hides home dirs)."""
    return Path(sys.base_prefix).resolve()


def run_command(spec: CommandSpec, scratch: Path, runner: Runner | None = None) -> CommandOutput:
    """Run one command to completion or deadline, leaving nothing behind: THE place replayed commands run.

    stdout and stderr are merged in write order and stdin is /dev/null (with ``tty``, all three are a fresh
    pseudo-terminal nobody types into). At the deadline the command and all its descendants are killed
    (``returncode`` None); after a normal exit, background descendants are killed too. A sandbox layer can replace
    this function: everything else only builds ``CommandSpec``s and formats results. The process starts inside
    ``runner.sandbox`` (default: local, no isolation) with the network off.
    """
    if runner is None:
        runner = Runner(local_sandbox(Path(spec.cwd)))
    log = scratch / "command.log"
    with contextlib.suppress(FileNotFoundError, IsADirectoryError):
        log.unlink()  # whatever was planted at the name goes (unlink never follows)
    argv = list(spec.argv)
    readable = runner.readable
    if spec.tty:
        argv = [sys.executable, "-I", "-c", _PTY_HELPER, *argv]
        readable = (*readable, _python_install())
    started = time.monotonic()
    result = (runner.executor or runner.sandbox).run(
        argv,
        cwd=str(spec.cwd),
        env=spec.env,
        timeout_s=spec.timeout_s,
        network=False,
        writable=runner.writable,
        readable=readable,
        merge_stderr=True,
        max_output_bytes=spec.keep_head + spec.keep_tail,
        log_path=log,
    )
    wall = time.monotonic() - started
    # The log is forkpoint's (outside the sandbox's writable folders), but read as if it could have been replaced.
    try:
        with refused_as(ErrorKind.EXECUTOR, f"read the command log {log}"):
            log_fd: int | None = open_regular_strict(scratch, log.name)
    except FileNotFoundError:
        log_fd = None
    head, tail = result.stdout, b""
    try:
        total = os.fstat(log_fd).st_size if log_fd is not None else len(result.stdout)
        if total > spec.keep_head + spec.keep_tail and log_fd is not None:
            head = result.stdout[: spec.keep_head]
            tail = os.pread(log_fd, spec.keep_tail, max(total - spec.keep_tail, 0))
    finally:
        if log_fd is not None:
            os.close(log_fd)
    with contextlib.suppress(OSError):
        log.unlink()
    code = result.returncode
    if result.timed_out:
        code = None
    elif code is None:
        code = -1
    elif code < 0:
        code = 128 - code
    return CommandOutput(code, head, tail, total, wall, result.background_cleanup, result.log_truncated)
