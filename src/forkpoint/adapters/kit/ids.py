"""Ids taken from a trajectory that become file names or command-line arguments (pure).

A trajectory comes from a stranger: its session id, rollout id or timestamp is joined to forkpoint's output
dir, placed in the agent's HOME (``<id>.jsonl``) and passed as ``--resume <id>``. With ``/``, ``..``, a NUL or a
leading ``-`` in it, that is a write outside the output dir or an option smuggled into the agent's argv. So
every such id must be one safe path component — ``[A-Za-z0-9._-]``, no leading ``.`` or ``-``, at most
``MAX_ID_LENGTH`` characters — and, where the agent's real shape is known, have that shape. A failure is a
trajectory error naming the field, raised by the parsers, before any output dir exists.

A format that legitimately stores a path-like id (SWE-agent's ``problem_statement.id`` of a run-replay file is
an absolute path) gets a derived safe name instead (``safe_file_stem``); the original stays in the metadata.
"""

from __future__ import annotations

import hashlib
import re

from forkpoint.core.errors import trajectory

MAX_ID_LENGTH = 128
_SAFE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_UNSAFE_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]+")
_SHOWN = 60

#: Real id shapes (see /work/shared/docs/native-*.md): Claude Code's session id is the session file's name (a
#: UUID when Claude wrote it, any safe name for hand-made files); Codex names a thread by a UUID (v7), Pi's
#: session header id is a UUID (v7), OpenCode ids are ``ses_`` + 26 base62 characters.
UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
OPENCODE_SESSION = re.compile(r"ses_[A-Za-z0-9]+")


def component_problem(value: object) -> str | None:
    """Why ``value`` cannot be one path component or argument, or None when it can."""
    if not isinstance(value, str):
        return "it is not a string"
    if value == "":
        return "it is empty"
    if "\x00" in value:
        return "it contains a NUL byte"
    if len(value) > MAX_ID_LENGTH:
        return f"it is {len(value)} characters long (at most {MAX_ID_LENGTH})"
    if "/" in value or "\\" in value:
        return "it contains a path separator"
    if value.startswith("."):
        return "it starts with '.' (a hidden name, '.' or '..')"
    if value.startswith("-"):
        return "it starts with '-' (it would be read as an option)"
    if not _SAFE.fullmatch(value):
        return "only letters, digits, '.', '_' and '-' are allowed"
    return None


def shown(value: object) -> str:
    """A bounded, escaped rendering for error messages (an overlong or control-laden id stays one short line)."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def check_id(value: object, field: str, *, shape: re.Pattern[str] | None = None, shape_name: str = "") -> str:
    """``value`` when it is a safe component (and has ``shape``), else a trajectory error naming ``field``."""
    problem = component_problem(value)
    if problem is None and shape is not None and not shape.fullmatch(str(value)):
        problem = f"it is not {shape_name or 'in the agent’s id format'}"
    if problem is not None:
        raise trajectory(f"{field} {shown(value)} cannot be used as a file name or argument: {problem}")
    assert isinstance(value, str)
    return value


def is_safe(value: object) -> bool:
    return component_problem(value) is None


def safe_file_stem(value: str) -> str:
    """``value`` itself when safe; else its last path component made safe plus 8 hex of its hash (stable, unique).

    For formats that legitimately store path-like ids; never raises.
    """
    if is_safe(value):
        return value
    base = value.replace("\\", "/").rstrip("/").rpartition("/")[2]
    cleaned = _UNSAFE_CHARACTERS.sub("_", base).lstrip(".-")[: MAX_ID_LENGTH - 16]
    digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{cleaned}-{digest}" if cleaned else f"id-{digest}"


__all__ = [
    "MAX_ID_LENGTH",
    "OPENCODE_SESSION",
    "UUID",
    "check_id",
    "component_problem",
    "is_safe",
    "safe_file_stem",
    "shown",
]
