"""How the CLI speaks: one styled line per message, JSON on stdout, typed failures with their exit codes."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from forkpoint.core.errors import ReplayError

RED, GREEN, YELLOW, DIM = "31", "32", "33", "2"


def say(message: str, *, err: bool = False, style: str | None = None) -> None:
    """One line to stdout (or stderr), styled only on a terminal (never in captured or piped output)."""
    stream = sys.stderr if err else sys.stdout
    if style is not None and stream.isatty() and "NO_COLOR" not in os.environ:
        message = f"\x1b[{style}m{message}\x1b[0m"
    stream.write(message + "\n")
    stream.flush()


def print_json(value: Any) -> None:
    import orjson

    sys.stdout.write(orjson.dumps(value).decode() + "\n")


def fail(error: ReplayError, as_json: bool) -> NoReturn:
    if as_json:
        print_json({"failure": {"category": error.kind.category, "message": error.message,
                                 "retryable": error.kind.retryable}})
    else:
        say(f"forkpoint: {error.kind.category}: {error.message}", err=True, style=RED)
    raise SystemExit(error.kind.exit_code)
