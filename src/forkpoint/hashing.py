"""Canonical JSON and SHA-256: the one definition every manifest, gate and journal hash uses (plus the one
search of a JSON value for a nonce that every gate uses)."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import orjson


def canonical_json(value: Any) -> str:
    """Sorted keys, compact separators, UTF-8 kept as is (not \\u-escaped)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def canonical_sha256(value: Any) -> str:
    return sha256_hex(canonical_json(value))


def file_sha256(path: Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def count_text(value: Any, needle: str) -> int:
    """How many times ``needle`` occurs in every string value and object key of ``value``.

    A needle of plain word characters starting with ``_`` (forkpoint's nonces) is never escaped by JSON, cannot
    straddle a key/value boundary (that would need a quote) and cannot start inside an escape sequence (``_`` is
    neither an escape letter nor a hex digit), so it is counted in the serialised bytes: one C pass instead of a
    Python walk of a request body that can be megabytes.
    """
    if _PLAIN.fullmatch(needle):
        return orjson.dumps(value).count(needle.encode())
    return _walk_count(value, needle)


_PLAIN = re.compile(r"_[A-Za-z0-9_-]*")


def _walk_count(value: Any, needle: str) -> int:
    if isinstance(value, str):
        return value.count(needle)
    if isinstance(value, dict):
        return sum(key.count(needle) + _walk_count(item, needle) for key, item in value.items())
    if isinstance(value, list):
        return sum(_walk_count(item, needle) for item in value)
    return 0
