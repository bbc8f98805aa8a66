"""Real-process tests for the supervisor: deadlines, termination, stdin, bounded output and the log."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process import ProcessResult, run_supervised

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux supervisor")

Bash = Callable[..., ProcessResult]  # the conftest fixtures
Dead = Callable[[int], None]


def test_stdin_is_written_then_closed(tmp_path: Path) -> None:
    result = run_supervised(["cat"], cwd=tmp_path, env=dict(os.environ), timeout_s=10, stdin=b"resume nonce")
    assert result.returncode == 0
    assert result.stdout == b"resume nonce"
    assert not result.timed_out and not result.background_cleanup


def test_large_stdin_does_not_deadlock_against_output(tmp_path: Path) -> None:
    payload = os.urandom(1024 * 1024)
    result = run_supervised(["cat"], cwd=tmp_path, env=dict(os.environ), timeout_s=10, stdin=payload)
    assert result.stdout == payload and result.returncode == 0


def test_without_stdin_the_command_reads_eof(bash: Bash) -> None:
    result = bash("cat; echo done", timeout_s=5)
    assert result.stdout == b"done\n" and not result.timed_out


def test_timeout_kills_the_foreground_command(tmp_path: Path, bash: Bash, assert_dead: Dead) -> None:
    started = time.monotonic()
    result = run_supervised(["sleep", "30"], cwd=tmp_path, env=dict(os.environ), timeout_s=0.2)
    assert time.monotonic() - started < 3
    assert result.timed_out and not result.background_cleanup
    assert result.returncode == -15
    # The same with a visible pid: the leader itself becomes `sleep`.
    result = bash("echo $$; exec sleep 30", timeout_s=0.2)
    assert result.timed_out and result.returncode == -15
    assert_dead(int(result.stdout))


def test_timeout_leaves_no_survivor_in_the_group(bash: Bash, assert_dead: Dead) -> None:
    started = time.monotonic()
    result = bash("sleep 30 & echo $!; sleep 30", timeout_s=0.3)
    assert time.monotonic() - started < 3
    assert result.timed_out and result.background_cleanup
    assert_dead(int(result.stdout))


def test_ignored_sigterm_is_followed_by_sigkill(bash: Bash, assert_dead: Dead) -> None:
    started = time.monotonic()
    result = bash("trap '' TERM; sleep 30 & echo $!; wait", timeout_s=0.3)
    assert time.monotonic() - started < 3
    assert result.timed_out
    assert result.returncode == -9
    assert_dead(int(result.stdout))


def test_output_is_bounded_but_fully_drained(tmp_path: Path, bash: Bash) -> None:
    log = tmp_path / "out.log"
    tracemalloc.start()
    try:
        result = bash("head -c 8388608 /dev/zero", max_output_bytes=64 * 1024, log_path=log)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.returncode == 0 and not result.timed_out
    assert result.stdout_truncated and not result.stderr_truncated
    assert len(result.stdout) == 64 * 1024
    assert peak < 2 * 1024 * 1024, peak
    assert log.stat().st_size == 8 * 1024 * 1024
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_log_quota_stops_writes(tmp_path: Path, bash: Bash) -> None:
    log = tmp_path / "out.log"
    log.write_bytes(b"old content that must go")
    log.chmod(0o644)
    result = bash("head -c 131072 /dev/zero; echo err >&2", log_path=log, max_log_bytes=32)
    assert result.returncode == 0 and result.log_truncated
    assert log.stat().st_size == 32
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert result.stderr == b"err\n"


def test_merged_stderr_keeps_the_written_order(tmp_path: Path, bash: Bash) -> None:
    log = tmp_path / "merged.log"
    result = bash("echo a; echo b >&2; echo c", merge_stderr=True, log_path=log)
    assert result.stdout == b"a\nb\nc\n"
    assert result.stderr == b""
    assert log.read_bytes() == b"a\nb\nc\n"


def test_separate_streams(bash: Bash) -> None:
    result = bash("echo out; echo err >&2; exit 3")
    assert (result.returncode, result.stdout, result.stderr) == (3, b"out\n", b"err\n")


def test_unknown_pipe_holder_does_not_hang_the_supervisor(tmp_path: Path) -> None:
    """A process outside the run (handed the stdout fd) keeps the pipe open: we stop after the pipe grace."""
    address = str(tmp_path / "fd.sock")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import socket,sys,time\n"
            "s=socket.socket(socket.AF_UNIX); s.bind(sys.argv[1]); s.listen(1); print('ready', flush=True)\n"
            "c,_=s.accept(); _,fds,_,_=socket.recv_fds(c,1,1); c.send(b'k'); time.sleep(30)\n",
            address,
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"ready\n"
        sender = (
            "import socket,sys\n"
            "s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
            "socket.send_fds(s,[b'x'],[1]); s.recv(1); print('sent', flush=True)\n"
        )
        started = time.monotonic()
        result = run_supervised(
            [sys.executable, "-c", sender, address], cwd=tmp_path, env=dict(os.environ), timeout_s=10
        )
        assert time.monotonic() - started < 1.5
        assert result.returncode == 0
        assert result.stdout == b"sent\n"
        assert result.stdout_truncated  # the holder could still have written more
    finally:
        holder.kill()
        holder.wait()


def test_spawn_failure_is_an_executor_error(tmp_path: Path) -> None:
    with pytest.raises(ReplayError) as caught:
        run_supervised([str(tmp_path / "missing")], cwd=tmp_path, env={}, timeout_s=1)
    assert caught.value.kind is ErrorKind.EXECUTOR


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (.ci/run installs it)")
def test_a_dying_pid_namespace_init_is_waited_for_not_reported_as_background_work(tmp_path: Path) -> None:
    """bwrap exits as soon as its command has; its namespace init (killed by ``--die-with-parent``) is still exiting
    when the supervisor looks. That is no background process of the command: it used to be reported as one
    (``background_cleanup``, written into tool records) and cost a 50 ms scan interval per command."""
    argv = [shutil.which("bwrap") or "bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
            "--unshare-pid", "--unshare-ipc", "--unshare-net", "--die-with-parent", "--cap-drop", "ALL", "--",
            "/bin/true"]
    results = [run_supervised(argv, cwd=tmp_path, env=dict(os.environ), timeout_s=30) for _ in range(12)]
    assert [result.returncode for result in results] == [0] * 12
    assert [result.background_cleanup for result in results] == [False] * 12
