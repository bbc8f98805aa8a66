"""A release's options from its own help: read once per entrypoint, whole words only, and every option when the
help cannot be read (the run then fails as before, its stderr saying why)."""

from __future__ import annotations

from pathlib import Path

from forkpoint.adapters.kit.cli_options import known_options, offered_options

#: a real ``opencode run --help`` without ``--thinking`` (1.1.16) and one with it (1.17.11, printed on stderr)
HELP = Path(__file__).parents[2] / "fixtures" / "opencode" / "help"


def printing_help(tmp_path: Path, help_text: str, code: int = 0, stream: str = "1") -> tuple[Path, Path]:
    """An executable that prints ``help_text`` on ``stream`` and logs each start to a file: (it, the log)."""
    (tmp_path / "help.txt").write_text(help_text, "utf-8")
    log = tmp_path / "starts.log"
    binary = tmp_path / "release"
    binary.write_text(f'#!/bin/sh\necho "$HOME $*" >> "{log}"\ncat "{tmp_path / "help.txt"}" >&{stream}\nexit {code}\n')
    binary.chmod(0o755)
    return binary, log


def test_the_help_is_read_once_per_entrypoint_in_a_home_removed_afterwards(tmp_path: Path) -> None:
    binary, log = printing_help(tmp_path, (HELP / "run-1.1.16.txt").read_text("utf-8"))
    for _ in range(3):
        assert offered_options("opencode", ("1.17.11",), binary, ("--thinking", "--print-logs"), ("run", "--help"),
                               "--session", private_home=True) == ["--print-logs"]
    starts = log.read_text("utf-8").splitlines()
    assert len(starts) == 1 and starts[0].endswith(" run --help")
    assert not Path(starts[0].split()[0]).exists()  # the private HOME went with the probe


def test_the_help_on_stderr_counts(tmp_path: Path) -> None:
    binary, _ = printing_help(tmp_path, (HELP / "run-1.17.11.txt").read_text("utf-8"), stream="2")
    assert offered_options("opencode", (), binary, ("--thinking",), ("run", "--help"), "--session") == ["--thinking"]


def test_an_unreadable_help_keeps_every_option_and_is_read_again(tmp_path: Path) -> None:
    binary, log = printing_help(tmp_path, "Usage: something else\n", code=0)
    for _ in range(2):
        assert offered_options("opencode", (), binary, ("--thinking",), ("run", "--help"), "--session") \
            == ["--thinking"]
    assert len(log.read_text("utf-8").splitlines()) == 2
    (tmp_path / "exits-1").mkdir()
    failing, _ = printing_help(tmp_path / "exits-1", (HELP / "run-1.1.16.txt").read_text("utf-8"), code=1)
    assert offered_options("opencode", (), failing, ("--thinking",), ("run", "--help"), "--session") == ["--thinking"]
    assert offered_options("opencode", (), tmp_path / "absent", ("--thinking",), ("run", "--help"), "--session") \
        == ["--thinking"]


def test_an_option_counts_only_as_a_whole_word() -> None:
    assert known_options("      --thinking-budget  x\n  --thinkings\n", ("--thinking",)) == []
    assert known_options("--print-logs, --thinking", ("--thinking", "--print-logs")) == ["--thinking", "--print-logs"]
