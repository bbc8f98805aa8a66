"""The step and idle watchdogs, fed the way forkpoint.process feeds them (chunks cut anywhere)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from forkpoint.adapters.opencode.watchdog import StepWatch
from forkpoint.process import WATCH_TERMINATE, run_supervised


def finish_line(reason: str = "tool-calls") -> bytes:
    return json.dumps({"type": "step_finish", "part": {"type": "step-finish", "reason": reason}}).encode() + b"\n"


def feed_in_pieces(watch: StepWatch, data: bytes, size: int = 7) -> None:
    for start in range(0, len(data), size):
        watch.output("stdout", data[start:start + size])


def test_sigint_once_the_budget_of_steps_has_finished() -> None:
    watch = StepWatch(budget=2, idle_s=60)
    feed_in_pieces(watch, b'{"type":"step_start"}\n' + finish_line())
    assert watch.steps == 1 and watch.action(watch.last_output) is None
    feed_in_pieces(watch, b'{"type":"tool_use"}\n' + finish_line()[:-1])
    assert watch.steps == 1  # the line is not complete yet
    watch.output("stdout", b"\n")
    assert watch.steps == 2
    now = watch.last_output
    assert watch.action(now) == signal.SIGINT and watch.budget_fired
    assert watch.action(now + 1) is None  # one SIGINT, then a grace period
    assert watch.action(now + watch.interrupt_grace_s + 1) == WATCH_TERMINATE


def test_no_signal_when_the_last_step_ended_the_run() -> None:
    watch = StepWatch(budget=1, idle_s=60)
    watch.output("stdout", finish_line("stop"))
    assert watch.finished and watch.action(watch.last_output) is None and not watch.budget_fired


def test_stderr_loop_lines_do_not_count_as_steps() -> None:
    watch = StepWatch(budget=1, idle_s=60)
    watch.output("stderr", b"level=INFO message=loop session.id=ses_x step=1\n" + finish_line())
    assert watch.steps == 0 and watch.action(watch.last_output) is None


def test_idle_terminates_and_any_output_resets_it() -> None:
    watch = StepWatch(budget=None, idle_s=5)
    start = watch.last_output
    assert watch.action(start + 4) is None
    watch.output("stderr", b"level=INFO message=stream\n")
    assert watch.action(watch.last_output + 4.5) is None and not watch.idle_fired
    assert watch.action(watch.last_output + 6) == WATCH_TERMINATE and watch.idle_fired


def test_the_watch_drives_a_real_supervised_process(tmp_path: Path) -> None:
    """Through forkpoint.process: SIGINT after the budget of stdout step_finish lines, terminate when idle."""
    loop = ("import json, sys, time\n"
            "while True:\n"
            "    print(json.dumps({'type': 'step_finish', 'part': {'reason': 'tool-calls'}}), flush=True)\n"
            "    time.sleep(0.2)\n")
    watch = StepWatch(budget=2, idle_s=30)
    started = time.monotonic()
    result = run_supervised([sys.executable, "-c", loop], cwd=tmp_path, env=dict(os.environ), timeout_s=30,
                            watch=watch)
    assert watch.budget_fired and watch.steps >= 2 and result.returncode == -signal.SIGINT
    assert time.monotonic() - started < 10
    silent = StepWatch(budget=None, idle_s=1)
    result = run_supervised(["sleep", "30"], cwd=tmp_path, env=dict(os.environ), timeout_s=30, watch=silent)
    assert silent.idle_fired and result.returncode is not None and result.returncode < 0
    assert not result.timed_out


def test_the_budget_interrupt_works_when_forkpoint_itself_ignores_sigint(tmp_path: Path) -> None:
    """A forkpoint started in a shell's background inherits SIGINT ignored; its watched agent must still die of it."""
    loop = ("import json, time\n"
            "while True:\n"
            "    print(json.dumps({'type': 'step_finish', 'part': {'reason': 'tool-calls'}}), flush=True)\n"
            "    time.sleep(0.2)\n")
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        watch = StepWatch(budget=1, idle_s=30)
        result = run_supervised([sys.executable, "-c", loop], cwd=tmp_path, env=dict(os.environ), timeout_s=30,
                                watch=watch)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert watch.budget_fired and result.returncode == -signal.SIGINT


def test_poll_reads_the_stdout_file_as_it_grows(tmp_path: Path) -> None:
    """The agent's stdout is a file (Bun drops a pipe's unflushed tail at exit): each tick reads what was added."""
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"")
    fd = os.open(path, os.O_RDONLY)
    try:
        watch = StepWatch(budget=1, idle_s=60, stdout_fd=fd)
        with path.open("ab") as handle:
            handle.write(b'{"type":"step_start"}\n' + finish_line()[:9])
        assert watch.action(time.monotonic()) is None and watch.steps == 0
        with path.open("ab") as handle:
            handle.write(finish_line()[9:])
        assert watch.action(time.monotonic()) == signal.SIGINT and watch.steps == 1
    finally:
        os.close(fd)
