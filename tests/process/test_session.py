"""LiveProcess: a supervised process that lives across calls, is typed into and drained, and leaves nothing."""

from __future__ import annotations

import os
import time
from pathlib import Path

from forkpoint.process.session import LiveProcess
from forkpoint.testing.processes import alive, gone_within


def test_typed_input_comes_back_and_the_exit_is_reaped(tmp_path: Path) -> None:
    process = LiveProcess(["cat"], cwd=tmp_path, env=dict(os.environ), max_pending_bytes=1024)
    try:
        assert process.write(b"hello\n")
        process.pump(time.monotonic() + 10, lambda: len(process.pending.data) >= 6)
        assert process.take() == (b"hello\n", 0)
        process.proc.stdin.close()  # type: ignore[union-attr]
        process.pump(time.monotonic() + 10, lambda: False)
        assert process.exited and process.returncode == 0
        assert not process.write(b"late\n")
    finally:
        process.kill()


def test_output_is_bounded_and_kill_ends_background_children(tmp_path: Path) -> None:
    script = "sleep 600 & echo $! > bg.pid; head -c 5000 /dev/zero; exec sleep 601"
    process = LiveProcess(["/bin/sh", "-c", script], cwd=tmp_path, env=dict(os.environ), max_pending_bytes=100,
                          stdin=False)
    process.pump(time.monotonic() + 10, lambda: (tmp_path / "bg.pid").exists() and process.pending.dropped >= 4900)
    data, dropped = process.take()
    assert (len(data), dropped) == (100, 4900)
    background = int((tmp_path / "bg.pid").read_text())
    assert alive(background) and not process.exited
    process.kill()
    process.kill()  # idempotent
    assert gone_within(background) and gone_within(process.proc.pid)


def test_without_stdin_the_process_reads_dev_null(tmp_path: Path) -> None:
    process = LiveProcess(["/bin/sh", "-c", "cat; echo eof"], cwd=tmp_path, env=dict(os.environ),
                          max_pending_bytes=100, stdin=False)
    try:
        assert not process.write(b"x")
        process.pump(time.monotonic() + 10, lambda: False)
        assert process.exited and process.take() == (b"eof\n", 0)
    finally:
        process.kill()


def test_a_write_to_a_process_that_never_reads_gives_up_at_its_deadline(tmp_path: Path) -> None:
    process = LiveProcess(["sleep", "600"], cwd=tmp_path, env=dict(os.environ), max_pending_bytes=100)
    try:
        started = time.monotonic()
        assert not process.write(b"x" * (4 * 1024 * 1024), time.monotonic() + 0.5)
        assert time.monotonic() - started < 5
    finally:
        process.kill()
    assert gone_within(process.proc.pid)
