"""Real-process tests for the supervisor: deadlines, group and escaped-descendant cleanup, bounded output."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from forkpoint.errors import ErrorKind, ReplayError
from forkpoint.process import SUPERVISION_ENV, ProcessResult, run_supervised, sanitized_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux supervisor")


def _bash(script: str, tmp_path: Path, *, timeout_s: float = 10.0, **kwargs: Any) -> ProcessResult:
    return run_supervised(
        ["/bin/bash", "-c", script], cwd=tmp_path, env=dict(os.environ), timeout_s=timeout_s, **kwargs
    )


def _alive(pid: int) -> bool:
    """True while the pid names a live (non-zombie) process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return False
    return raw[raw.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def _assert_dead(pid: int) -> None:
    deadline = time.monotonic() + 1.0
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not _alive(pid), f"pid {pid} survived supervision"
    assert not os.path.exists(f"/proc/{pid}") or not _alive(pid)


def test_stdin_is_written_then_closed(tmp_path: Path) -> None:
    result = run_supervised(["cat"], cwd=tmp_path, env=dict(os.environ), timeout_s=10, stdin=b"resume nonce")
    assert result.returncode == 0
    assert result.stdout == b"resume nonce"
    assert not result.timed_out and not result.background_cleanup


def test_large_stdin_does_not_deadlock_against_output(tmp_path: Path) -> None:
    payload = os.urandom(1024 * 1024)
    result = run_supervised(["cat"], cwd=tmp_path, env=dict(os.environ), timeout_s=10, stdin=payload)
    assert result.stdout == payload and result.returncode == 0


def test_without_stdin_the_command_reads_eof(tmp_path: Path) -> None:
    result = _bash("cat; echo done", tmp_path, timeout_s=5)
    assert result.stdout == b"done\n" and not result.timed_out


def test_timeout_kills_the_foreground_command(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run_supervised(["sleep", "30"], cwd=tmp_path, env=dict(os.environ), timeout_s=0.2)
    assert time.monotonic() - started < 3
    assert result.timed_out and not result.background_cleanup
    assert result.returncode == -15
    # The same with a visible pid: the leader itself becomes `sleep`.
    result = _bash("echo $$; exec sleep 30", tmp_path, timeout_s=0.2)
    assert result.timed_out and result.returncode == -15
    _assert_dead(int(result.stdout))


def test_timeout_leaves_no_survivor_in_the_group(tmp_path: Path) -> None:
    started = time.monotonic()
    result = _bash("sleep 30 & echo $!; sleep 30", tmp_path, timeout_s=0.3)
    assert time.monotonic() - started < 3
    assert result.timed_out and result.background_cleanup
    _assert_dead(int(result.stdout))


def test_ignored_sigterm_is_followed_by_sigkill(tmp_path: Path) -> None:
    started = time.monotonic()
    result = _bash("trap '' TERM; sleep 30 & echo $!; wait", tmp_path, timeout_s=0.3)
    assert time.monotonic() - started < 3
    assert result.timed_out
    assert result.returncode == -9
    _assert_dead(int(result.stdout))


def test_background_child_is_killed_after_the_leader_exits(tmp_path: Path) -> None:
    started = time.monotonic()
    result = _bash("sleep 30 & echo $!", tmp_path)
    assert time.monotonic() - started < 3
    assert result.returncode == 0 and not result.timed_out
    assert result.background_cleanup
    _assert_dead(int(result.stdout))


@pytest.mark.parametrize(
    "script",
    [
        pytest.param("setsid sleep 30 & echo $!", id="setsid"),
        pytest.param("(sleep 30 & echo $!) & wait", id="double-fork"),
        pytest.param("(setsid sleep 30 & echo $!) & wait", id="double-fork-setsid"),
        pytest.param("(setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $!) & wait", id="daemonised"),
        pytest.param("(env -i setsid sleep 30 >/dev/null 2>&1 & echo $!) & wait", id="env-cleared"),
    ],
)
def test_escaped_descendants_are_killed(tmp_path: Path, script: str) -> None:
    started = time.monotonic()
    result = _bash(script, tmp_path)
    assert time.monotonic() - started < 3
    assert result.returncode == 0
    assert result.background_cleanup
    _assert_dead(int(result.stdout))


def test_supervision_token_is_in_the_child_env(tmp_path: Path) -> None:
    result = _bash(f'echo "${SUPERVISION_ENV}"', tmp_path)
    assert len(result.stdout.strip()) == 32


def test_output_is_bounded_but_fully_drained(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    tracemalloc.start()
    try:
        result = _bash("head -c 8388608 /dev/zero", tmp_path, max_output_bytes=64 * 1024, log_path=log)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.returncode == 0 and not result.timed_out
    assert result.stdout_truncated and not result.stderr_truncated
    assert len(result.stdout) == 64 * 1024
    assert peak < 2 * 1024 * 1024, peak
    assert log.stat().st_size == 8 * 1024 * 1024
    assert stat.S_IMODE(log.stat().st_mode) == 0o600


def test_log_quota_stops_writes(tmp_path: Path) -> None:
    log = tmp_path / "out.log"
    log.write_bytes(b"old content that must go")
    log.chmod(0o644)
    result = _bash("head -c 131072 /dev/zero; echo err >&2", tmp_path, log_path=log, max_log_bytes=32)
    assert result.returncode == 0 and result.log_truncated
    assert log.stat().st_size == 32
    assert stat.S_IMODE(log.stat().st_mode) == 0o600
    assert result.stderr == b"err\n"


def test_merged_stderr_keeps_the_written_order(tmp_path: Path) -> None:
    log = tmp_path / "merged.log"
    result = _bash("echo a; echo b >&2; echo c", tmp_path, merge_stderr=True, log_path=log)
    assert result.stdout == b"a\nb\nc\n"
    assert result.stderr == b""
    assert log.read_bytes() == b"a\nb\nc\n"


def test_separate_streams(tmp_path: Path) -> None:
    result = _bash("echo out; echo err >&2; exit 3", tmp_path)
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


def test_sanitized_env_drops_python_and_credentials() -> None:
    base = {
        "PATH": "/bin",
        "HOME": "/home/x",
        "PYTHONHOME": "/py",
        "PYTHONPATH": "/pp",
        "VIRTUAL_ENV": "/venv",
        "ANTHROPIC_API_KEY": "k",
        "openai_api_key": "k",
        "GITHUB_TOKEN": "t",
        "AWS_SECRET_ACCESS_KEY": "s",
        "HTTP_AUTHORIZATION": "a",
        "DB_PASSWORD": "p",
        "CLAUDE_CODE_USE_BEDROCK": "1",
        "CLAUDE_CODE_USE_VERTEX": "1",
        "CLAUDE_CODE_USE_FOUNDRY": "1",
        "TERM": "xterm",
    }
    assert sanitized_env(base, strip_credentials=True) == {"PATH": "/bin", "HOME": "/home/x", "TERM": "xterm"}
    kept = sanitized_env(base, strip_credentials=False)
    assert "PYTHONHOME" not in kept and "PYTHONPATH" not in kept and "VIRTUAL_ENV" not in kept
    assert kept["ANTHROPIC_API_KEY"] == "k" and kept["CLAUDE_CODE_USE_BEDROCK"] == "1"


def test_concurrent_supervisions_do_not_touch_each_other(tmp_path: Path) -> None:
    results: dict[str, ProcessResult] = {}

    def slow() -> None:
        results["slow"] = _bash("sleep 0.6; echo slow-done", tmp_path)

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.1)
    quick = _bash("setsid sleep 30 & echo $!", tmp_path)
    thread.join()
    assert quick.background_cleanup
    _assert_dead(int(quick.stdout))
    assert results["slow"].returncode == 0 and results["slow"].stdout == b"slow-done\n"
    assert not results["slow"].background_cleanup
