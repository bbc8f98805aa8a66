"""Read a JSON trajectory as forkpoint's own input: a whole document (SWE-agent ``.traj``, OpenHands event list)
or one record of a JSON-lines recording (Claude Code, Codex, Pi).

Shared by the adapters' parsers, with the tolerant accessors they use for optional native fields; it lives outside
the adapter folders so no adapter imports another.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters.source import read_trajectory
from forkpoint.core.errors import trajectory
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES
from forkpoint.core.hashing import sha256_hex

#: from this size a record is parsed by the stdlib: orjson 3.13 transiently holds ~13x a huge string while parsing
#: it (a 20 MB line peaked at 260 MB), the stdlib ~2x (the decoded text and the result)
HUGE_RECORD_BYTES = 1 << 20


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_record(body: bytes | memoryview) -> Any:
    """One JSON record as ``orjson.loads`` reads it (its errors included: invalid UTF-8, NaN, nesting too deep
    are ``orjson.JSONDecodeError``), in bounded memory when huge (see ``HUGE_RECORD_BYTES``)."""
    if len(body) < HUGE_RECORD_BYTES:
        return orjson.loads(body)
    try:
        return json.loads(str(body, "utf-8"), parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and json's JSONDecodeError are ValueErrors
        raise orjson.JSONDecodeError(str(exc), "", 0) from None


def load_json_document(path: Path, what: str, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> tuple[Any, str]:
    """The parsed document and the SHA-256 of its bytes; typed trajectory errors for anything unreadable."""
    try:
        raw = read_trajectory(path, max_bytes, what)
    except OSError as error:
        raise trajectory(f"cannot read the {what} {path}: {error.strerror or error}") from None
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as error:
        raise trajectory(f"the {what} {path} is not valid JSON: {error}") from None
    return data, sha256_hex(raw)


def load_jsonl_object(
    body: bytes | memoryview,
    number: int,
    *,
    terminated: bool,
    warnings: list[str],
    invalid: str = "invalid JSON at line {number}",
    not_object: str = "line {number} is not a JSON object",
) -> dict[str, Any] | None:
    """JSON-lines record ``number`` as an object; None for a torn final (unterminated) line, which a recording cut
    mid-write leaves and which is skipped with a warning. Any other invalid line is a trajectory error."""
    try:
        obj = loads_record(body)
    except orjson.JSONDecodeError as exc:
        if not terminated:
            warnings.append(f"ignored a torn final line {number} (the recording was cut mid-write)")
            return None
        raise trajectory(f"{invalid.format(number=number)}: {exc}", line=number) from None
    if not isinstance(obj, dict):
        raise trajectory(not_object.format(number=number), line=number)
    return obj


def as_object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (tolerant reads of optional native fields)."""
    return value if isinstance(value, dict) else {}


def as_text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default
