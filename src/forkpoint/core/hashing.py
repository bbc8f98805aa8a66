"""Canonical JSON and SHA-256: the one definition every manifest, gate and journal hash uses (plus the one
search of a JSON value for a nonce that every gate uses)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from pathlib import Path


def canonical_json(value: Any) -> str:
    """Sorted keys, compact separators, UTF-8 kept as is (not \\u-escaped): ``json.dumps``'s text."""
    fast = _fast_canonical(value)
    return fast.decode("utf-8") if fast is not None else _stdlib_canonical(value)


def canonical_bytes(value: Any) -> bytes:
    """``canonical_json(value)`` as UTF-8 bytes."""
    fast = _fast_canonical(value)
    return fast if fast is not None else _stdlib_canonical(value).encode("utf-8")


def _stdlib_canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


#: below this size ``json.dumps`` is cheap; above it (a tool output of megabytes: 7 ms per 2 MB) orjson writes
#: the same bytes ~30 times faster
FAST_MIN_BYTES = 16 * 1024
_FAST_OPTIONS = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATETIME
                 | orjson.OPT_PASSTHROUGH_DATACLASS)
_SCALARS = frozenset({str, int, bool, type(None)})


def _fast_canonical(value: Any, min_bytes: int = FAST_MIN_BYTES) -> bytes | None:
    """orjson's serialisation when it is provably ``json.dumps``'s text, else None.

    Both sort keys by code point and escape exactly ``"``, ``\\`` and the control characters the same way; they
    differ on floats (``1e-07`` vs ``1e-7``, NaN), subclasses, non-str keys, ints beyond 64 bits and types only
    orjson knows (enum, UUID...). orjson refuses the subclasses, wide ints, non-str keys and lone surrogates; the
    walk refuses everything but exact dict/list/tuple/str/int/bool/None (one step per node, not per byte).
    """
    try:
        out = orjson.dumps(value, option=_FAST_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError
        return None
    if len(out) < min_bytes or not _plain(value):
        return None
    return out


def _plain(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            if not all(type(key) is str for key in item):
                return False
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind not in _SCALARS:
            return False
    return True


def sha256_hex(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def canonical_sha256(value: Any) -> str:
    return sha256_hex(canonical_bytes(value))


#: from here on a helper thread pays off: hashing 1 MiB takes ≈ 0.6 ms, starting and joining a thread ≈ 0.1 ms
_BACKGROUND_HASH_MIN = 1 << 20


def sha256_pending(chunks: Sequence[bytes | memoryview]) -> Callable[[], str]:
    """Start the SHA-256 of ``chunks`` (in order); calling the result returns its hex digest.

    Large inputs are hashed on a helper thread: hashlib releases the GIL for big updates, so next to a
    Python-bound parse or a write the hash costs no wall time on a machine with a second core. The chunks
    must not change until the result has been called.
    """
    digest = hashlib.sha256()
    if sum(len(chunk) for chunk in chunks) < _BACKGROUND_HASH_MIN:
        for chunk in chunks:
            digest.update(chunk)
        done = digest.hexdigest()
        return lambda: done
    import threading

    failure: list[BaseException] = []

    def run() -> None:
        try:
            for chunk in chunks:
                digest.update(chunk)
        except BaseException as exc:  # re-raised by the caller's join: a partial digest is never returned
            failure.append(exc)

    thread = threading.Thread(target=run, name="forkpoint-sha256", daemon=True)
    thread.start()

    def join() -> str:
        thread.join()
        if failure:
            raise failure[0]
        return digest.hexdigest()

    return join


def file_sha256(path: Path, chunk_size: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(chunk_size):
            digest.update(chunk)
    return digest.hexdigest()


def make_nonce() -> str:
    """A fresh resume prompt that cannot collide with anything in a session or a system prompt; plain word
    characters starting with ``_``, so :func:`count_text` counts it in serialised bytes."""
    import secrets  # only a continuation makes a nonce

    return f"__forkpoint_nonce_{secrets.token_hex(16)}__"


def count_text(value: Any, needle: str) -> int:
    """How many times ``needle`` occurs in every string value and object key of ``value``.

    A needle of plain word characters starting with ``_`` (forkpoint's nonces) is never escaped by JSON, cannot
    straddle a key/value boundary (that would need a quote) and cannot start inside an escape sequence (``_`` is
    neither an escape letter nor a hex digit), so it is counted in the serialised bytes: one C pass instead of a
    Python walk of a request body that can be megabytes. Not in the request's raw bytes: there a ``\\u005f``
    escape can spell a nonce character, and ruling escapes out is a short-needle search that costs more than this
    serialisation on backslash-dense bodies (1.2 ms vs 0.2 ms on 2 MB of tool output).
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
