"""The `forkpoint` command line: thin — parse arguments, call the engine, print, exit with its code.

Start-up is the budget here (issue 8, issue 16): this module imports only ``os`` and ``sys``. `--version` and
`--help` (of any command) are answered without argparse: the help texts are argparse's own output, stored as
``help/<python>/forkpoint-<command>.txt`` by ``scripts/regen_cli_help.py`` (a test keeps them equal, so they cannot
drift). Anything else builds the argparse tree (forkpoint.cli.parser); each command's body lives in
forkpoint.cli.commands (or .batch) and is imported only when that command runs.
"""

from __future__ import annotations

import os
import sys

from forkpoint import __version__

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: ~2 ms of a 30 ms --help (mypy knows the name)
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable

#: `--help` wraps at the terminal's width, as argparse measures it, but at most at this many columns: one text
#: for every wider terminal and every pipe, the one stored under HELP_DIR.
HELP_COLUMNS = 80
HELP_DIR = os.path.join(os.path.dirname(__file__), "help")


def stored_help(command: list[str], python: tuple[int, int]) -> str:
    """The file holding `forkpoint COMMAND... --help` as the argparse of Python ``python`` prints it."""
    return os.path.join(HELP_DIR, f"{python[0]}.{python[1]}", "-".join(["forkpoint", *command]) + ".txt")


def help_width() -> int:
    """The width help text is wrapped to: shutil.get_terminal_size's columns ($COLUMNS, else stdout's terminal,
    else 80; without importing shutil) at most HELP_COLUMNS, less argparse's 2-column margin."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0 and sys.__stdout__ is not None:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (ValueError, OSError):
            columns = 0
    return min(columns if columns > 0 else 80, HELP_COLUMNS) - 2


def _write(text: str) -> None:
    """As argparse prints help and the version: to stdout, silently dropped when stdout is gone."""
    try:  # noqa: SIM105 (contextlib.suppress would import contextlib: 0.4 ms of this start)
        sys.stdout.write(text)
    except (AttributeError, OSError):
        pass


def answer_without_argparse(words: list[str]) -> str | None:
    """What `forkpoint --version`, `forkpoint [COMMAND...] --help` print (exit 0), or None for argparse to do it:
    every other command line, a terminal narrower than HELP_COLUMNS, or a Python with no stored texts (its
    argparse may word help differently)."""
    if words == ["--version"]:
        return f"forkpoint {__version__}\n"
    command = words[:-1]
    if not words or words[-1] not in ("-h", "--help") or help_width() != HELP_COLUMNS - 2:
        return None
    if not all(word.isascii() and word.isalpha() and word.islower() for word in command):
        return None  # not a command name (and never a path)
    try:
        with open(stored_help(command, (sys.version_info[0], sys.version_info[1])), encoding="utf-8",
                  newline="") as stored:
            return stored.read()
    except FileNotFoundError:  # no such command (argparse says so), or no texts for this Python
        return None


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script; exits with the command's code (2 for a usage error)."""
    words = sys.argv[1:] if argv is None else argv
    text = answer_without_argparse(words)
    if text is not None:
        _write(text)
        raise SystemExit(0)
    from forkpoint.cli.parser import build_parser

    args = build_parser(next((word for word in words if not word.startswith("-")), None)).parse_args(words)
    if args.run is None:  # a command group without its command: teach it, as a usage error
        args.help_of.print_help()
        raise SystemExit(2)
    module, _, function = args.run.partition(":")
    import importlib

    handler: Callable[[argparse.Namespace], None] = vars(importlib.import_module(f"forkpoint.cli.{module}"))[function]
    try:
        handler(args)
    except KeyboardInterrupt:  # as click (the CLI's former base) did: one word and exit code 1, no traceback
        sys.stderr.write("Aborted!\n")
        sys.stderr.flush()
        raise SystemExit(1) from None
    except BrokenPipeError:  # the reader of stdout went away (`| head`): nothing more to say to it
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        raise SystemExit(1) from None
