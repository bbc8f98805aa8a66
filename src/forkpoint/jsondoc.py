"""Read a whole-document JSON trajectory (SWE-agent ``.traj``, OpenHands event list) as forkpoint's own input.

Shared by the adapters whose native file is one JSON document (not JSON lines), with the tolerant accessors their
parsers use for optional native fields; it lives outside the adapter folders so no adapter imports another.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters.source import read_trajectory
from forkpoint.errors import trajectory
from forkpoint.fs import DEFAULT_MAX_INPUT_BYTES
from forkpoint.hashing import sha256_hex


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


def as_object(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (tolerant reads of optional native fields)."""
    return value if isinstance(value, dict) else {}


def as_text(value: Any, default: str = "") -> str:
    return value if isinstance(value, str) else default
