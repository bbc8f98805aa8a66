"""adapters.kit.shell: the one runner of replayed commands (merged output, head + tail, deadline, tty, its log)."""

from __future__ import annotations

import signal
from pathlib import Path

from forkpoint.adapters.kit.shell import CommandSpec, run_command

ENV = {"PATH": "/usr/bin:/bin"}


def _spec(script: str, cwd: Path, *, keep_head: int = 1024, keep_tail: int = 0, timeout_s: float = 10.0,
          tty: bool = False) -> CommandSpec:
    return CommandSpec(("/bin/sh", "-c", script), cwd, ENV, timeout_s, keep_head, keep_tail, tty)


def _scratch(tmp_path: Path) -> Path:
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    return scratch


def test_stdout_and_stderr_are_merged_in_write_order(tmp_path: Path) -> None:
    output = run_command(_spec("echo one; echo two >&2; echo three", tmp_path), _scratch(tmp_path))
    assert (output.returncode, output.head, output.tail) == (0, b"one\ntwo\nthree\n", b"")
    assert output.total_bytes == len(b"one\ntwo\nthree\n")


def test_a_long_output_keeps_its_head_and_its_tail(tmp_path: Path) -> None:
    script = "printf 'HEAD'; head -c 100000 /dev/zero | tr '\\0' x; printf 'TAIL'"
    output = run_command(_spec(script, tmp_path, keep_head=16, keep_tail=8), _scratch(tmp_path))
    assert output.head == b"HEAD" + b"x" * 12
    assert output.tail == b"x" * 4 + b"TAIL"
    assert output.total_bytes == 100_008


def test_exit_codes_and_signals(tmp_path: Path) -> None:
    scratch = _scratch(tmp_path)
    assert run_command(_spec("exit 3", tmp_path), scratch).returncode == 3
    killed = run_command(_spec("kill -TERM $$", tmp_path), scratch)
    assert killed.returncode == 128 + signal.SIGTERM


def test_the_deadline_kills_the_command_and_reports_no_code(tmp_path: Path) -> None:
    output = run_command(_spec("echo started; sleep 30", tmp_path, timeout_s=0.5), _scratch(tmp_path))
    assert output.returncode is None
    assert output.head == b"started\n"
    assert output.wall_time_s < 10


def test_stdin_is_empty_without_a_tty(tmp_path: Path) -> None:
    output = run_command(_spec("cat; test -t 0 || echo no-tty", tmp_path), _scratch(tmp_path))
    assert output.head == b"no-tty\n"


def test_a_tty_command_runs_on_a_24x80_terminal(tmp_path: Path) -> None:
    output = run_command(_spec("test -t 1 && stty size", tmp_path, tty=True), _scratch(tmp_path))
    assert output.returncode == 0
    assert output.head == b"24 80\r\n"


def test_the_log_is_removed_and_a_planted_link_is_not_followed(tmp_path: Path) -> None:
    scratch = _scratch(tmp_path)
    outside = tmp_path / "outside.txt"
    outside.write_text("keep")
    (scratch / "command.log").symlink_to(outside)
    output = run_command(_spec("echo hello", tmp_path), scratch)
    assert output.head == b"hello\n"
    assert outside.read_text() == "keep"
    assert list(scratch.iterdir()) == []
