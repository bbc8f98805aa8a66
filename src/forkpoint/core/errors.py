"""Typed failures: every refusal carries a category, an exit code and whether retrying can help.

The categories and exit codes are part of the output contract (ARCHITECTURE.md): scripts branch on them.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class _Kind:
    category: str
    exit_code: int
    retryable: bool


class ErrorKind(Enum):
    CONFIGURATION = _Kind("configuration_error", 2, False)
    TRAJECTORY = _Kind("trajectory_error", 10, False)
    UNSUPPORTED_AGENT = _Kind("unsupported_agent", 11, False)
    UNSUPPORTED_VERSION = _Kind("unsupported_version", 11, False)
    UNSUPPORTED_TOOL = _Kind("unsupported_tool", 11, False)  # a call no verified profile can re-run
    WORKSPACE = _Kind("workspace_error", 20, False)
    OUTPUT = _Kind("output_error", 21, False)  # forkpoint's own files (output or state dir) could not be written
    EXECUTOR = _Kind("executor_error", 30, False)
    AMBIGUOUS_EXECUTION = _Kind("ambiguous_execution", 31, False)
    DIVERGENCE = _Kind("divergence", 32, False)  # --on-divergence stop: the replayed world differs
    CONTINUATION = _Kind("continuation_error", 40, False)
    MODEL_RATE_LIMIT = _Kind("model_rate_limit", 40, True)
    MODEL_INTERNAL = _Kind("model_internal_error", 40, True)
    MODEL_CONNECTION = _Kind("model_connection_error", 40, True)
    #: the upstream went silent or never ended an answer (``--upstream-idle-timeout``, ``--answer-timeout``), or
    #: was still answering when the continuation's deadline passed (``--continuation-timeout``)
    MODEL_TIMEOUT = _Kind("model_timeout", 40, True)
    INTERNAL = _Kind("internal_error", 50, False)

    @property
    def category(self) -> str:
        return self.value.category

    @property
    def exit_code(self) -> int:
        return self.value.exit_code

    @property
    def retryable(self) -> bool:
        return self.value.retryable


class ReplayError(Exception):
    """A refusal or failure with a stable category; the message is shown to the user verbatim."""

    def __init__(
        self, kind: ErrorKind, message: str, *, line: int | None = None, before_effect: bool = False,
        stale_fallback: bool = False,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.line = line
        #: True when a tool call was refused before it could have any side effect (not ambiguous).
        self.before_effect = before_effect
        #: True when the refused call may reuse its recorded observation under --allow-stale-observations (what
        #: the executor found only at run time, e.g. an image the agent would have re-encoded)
        self.stale_fallback = stale_fallback and before_effect

    def __str__(self) -> str:
        return self.message

    def with_context(self, context: str) -> ReplayError:
        return ReplayError(self.kind, f"{context}: {self.message}", line=self.line, before_effect=self.before_effect)


def configuration(message: str) -> ReplayError:
    return ReplayError(ErrorKind.CONFIGURATION, message)


def trajectory(message: str, *, line: int | None = None) -> ReplayError:
    return ReplayError(ErrorKind.TRAJECTORY, message, line=line)


def unsupported_version(message: str) -> ReplayError:
    return ReplayError(ErrorKind.UNSUPPORTED_VERSION, message)


def unsupported_tool(message: str) -> ReplayError:
    return ReplayError(ErrorKind.UNSUPPORTED_TOOL, message)


_NO_SPACE = {errno.ENOSPC: "no space left on device", errno.EDQUOT: "disk quota exceeded"}


def no_space(exc: OSError, path: object | None = None) -> ReplayError | None:
    """An out-of-space (or quota) failure writing forkpoint's own files as an ``output_error``, else None.

    Not retryable as is: when it strikes after tools ran, their effects are in the workspace, which is no longer
    fresh (the engine says so). ``path`` names the file when the OSError does not (a failed ``write`` carries no
    file name).
    """
    reason = _NO_SPACE.get(exc.errno or 0)
    if reason is None:
        return None
    where = exc.filename if exc.filename is not None else path
    shown = where if where is not None else "an output file"
    return ReplayError(ErrorKind.OUTPUT, f"{reason} writing {shown} (free space or choose another "
                                         "--output-dir/--state-dir)")


def classify_continuation_output(output: str) -> ErrorKind:
    """Pick the retryable model category from an agent's output tail, else a plain continuation error."""
    text = output.lower()
    if any(s in text for s in ("rate limit", "too many requests", "status 429", " 429 ")):
        return ErrorKind.MODEL_RATE_LIMIT
    if any(s in text for s in ("internal server error", "status 500", "status 502", "status 503", "overloaded")):
        return ErrorKind.MODEL_INTERNAL
    if any(
        s in text
        for s in ("connection refused", "connection reset", "connection timed out", "could not resolve host",
                  "connecterror", "econnrefused", "econnreset")
    ):
        return ErrorKind.MODEL_CONNECTION
    return ErrorKind.CONTINUATION
