"""The `forkpoint` command line: thin — parse arguments, call the engine, print, exit with its code.

Start-up is the budget here (issue 8, issue 16): this module imports only ``os`` and ``sys``. `--version` and
`--help` (of any command) are answered without argparse: the help texts are argparse's own output, stored in
forkpoint.cli.help_text by ``scripts/regen_cli_help.py`` (a test keeps them equal, so they cannot drift). Anything
else builds the argparse tree (forkpoint.cli.parser); each command's body lives in forkpoint.cli.commands (or
.batch) and is imported only when that command runs.
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
#: for every wider terminal and every pipe, the one forkpoint.cli.help_text stores.
HELP_COLUMNS = 80


def help_width() -> int:
    """The width help text is wrapped to: shutil.get_terminal_size's columns ($COLUMNS, else stdout's terminal,
    else 80; without importing shutil) at most HELP_COLUMNS, less argparse's 2-column margin."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
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
    every other command line, a terminal narrower than HELP_COLUMNS, or a Python whose argparse may format help
    differently from the one that wrote the stored texts."""
    if words == ["--version"]:
        return f"forkpoint {__version__}\n"
    if not words or words[-1] not in ("-h", "--help") or help_width() != HELP_COLUMNS - 2:
        return None
    from forkpoint.cli.help_text import HELP, PYTHON

    return HELP.get(" ".join(words[:-1])) if sys.version_info[:2] == PYTHON else None


def main(argv: list[str] | None = None) -> None:
    """Entry point of the console script; exits with the command's code (2 for a usage error)."""
    words = sys.argv[1:] if argv is None else argv
    text = answer_without_argparse(words)
    if text is not None:
        _write(text)
        raise SystemExit(0)
    from forkpoint.cli.parser import build_parser

    args = build_parser().parse_args(words)
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
