"""Codex's text helpers, re-implemented byte for byte: token estimates, middle truncation, Rust formatting.

Measured on the real 0.149.0 / 0.171.0 binaries (both behave the same here):

- A token is estimated as ``ceil(bytes / 4)`` of the RAW output (not of the lossily decoded text).
- Output over ``max_output_tokens * 4`` bytes keeps the first and last ``max_output_tokens * 2`` bytes (cut on
  UTF-8 boundaries, the head rounded down, the tail rounded up) around ``…N tokens truncated…``, where N is
  ``ceil(removed bytes / 4)``; a budget of 0 keeps only the marker.
- ``Total output lines`` counts lines as Rust's ``str::lines`` does (a final line ending adds no line).
- Error texts quote Rust values with ``{:?}`` (``rust_debug``) and commands with the ``shlex`` crate
  (``shlex_join``), which prefers single quotes and falls back to double quotes.
"""

from __future__ import annotations

import math
import os

BYTES_PER_TOKEN = 4


def approx_tokens(byte_count: int) -> int:
    """Codex's token estimate for ``byte_count`` bytes (rounded up)."""
    return (byte_count + BYTES_PER_TOKEN - 1) // BYTES_PER_TOKEN


def rust_lines_count(text: str) -> int:
    """How many lines Rust's ``str::lines`` yields: ``\\n`` separates, a trailing ``\\n`` ends the last line."""
    if not text:
        return 0
    count = text.count("\n")
    return count if text.endswith("\n") else count + 1


def rust_lines(text: str) -> list[str]:
    """Rust's ``str::lines``: split on ``\\n``, drop one trailing ``\\r`` per line, no empty last line."""
    if not text:
        return []
    parts = text.split("\n")
    if text.endswith("\n"):
        parts.pop()
    return [part[:-1] if part.endswith("\r") else part for part in parts]


def _floor_boundary(data: bytes, index: int) -> int:
    index = min(index, len(data))
    while 0 < index < len(data) and (data[index] & 0xC0) == 0x80:
        index -= 1
    return index


def _ceil_boundary(data: bytes, index: int) -> int:
    index = max(index, 0)
    while 0 < index < len(data) and (data[index] & 0xC0) == 0x80:
        index += 1
    return index


def truncate_middle(text: str, max_tokens: int) -> str:
    """Keep the head and tail of ``text`` within ``max_tokens * 4`` bytes, with Codex's token marker between."""
    data = text.encode("utf-8")
    budget = max_tokens * BYTES_PER_TOKEN
    if not data:
        return ""
    if budget == 0:
        return f"…{approx_tokens(len(data))} tokens truncated…"
    if len(data) <= budget:
        return text
    left_budget = budget // 2
    right_budget = budget - left_budget
    prefix_end = _floor_boundary(data, left_budget)
    suffix_start = max(_ceil_boundary(data, len(data) - right_budget), prefix_end)
    removed = len(data) - prefix_end - (len(data) - suffix_start)
    head = data[:prefix_end].decode("utf-8")
    tail = data[suffix_start:].decode("utf-8")
    return f"{head}…{approx_tokens(removed)} tokens truncated…{tail}"


def needs_truncation(text: str, max_tokens: int) -> bool:
    return len(text.encode("utf-8")) > max_tokens * BYTES_PER_TOKEN


#: the characters Rust's ``{:?}`` escapes by name
_RUST_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\0": "\\0"}


def rust_debug(value: str) -> str:
    """Rust's ``{:?}`` of a ``str``: double quotes, escapes for quotes, backslashes and control characters."""
    out = ['"']
    for char in value:
        code = ord(char)
        if char in _RUST_ESCAPES:
            out.append(_RUST_ESCAPES[char])
        elif code < 0x20 or 0x7F <= code < 0xA0:
            out.append(f"\\u{{{code:x}}}")
        else:
            out.append(char)
    out.append('"')
    return "".join(out)


# ----------------------------------------------------------------------------------------- shlex (Rust crate)

_UNQUOTED_OK = frozenset("+-./:@]_0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_UNQUOTED, _SINGLE, _DOUBLE = 1, 2, 4


def _quoting_strategy(data: bytes) -> tuple[int, int]:
    prev_ok = _SINGLE | _DOUBLE | _UNQUOTED
    index = 0
    if data[0] == ord("^"):
        prev_ok = _SINGLE
        index = 1
    while index < len(data):
        byte = data[index]
        cur_ok = prev_ok
        if byte >= 0x80:
            cur_ok &= ~_UNQUOTED
        else:
            char = chr(byte)
            if char not in _UNQUOTED_OK:
                cur_ok &= ~_UNQUOTED
            if char in "'^\\":
                cur_ok &= ~_SINGLE
            if char in "`$!^":
                cur_ok &= ~_DOUBLE
        if cur_ok == 0:
            break
        prev_ok = cur_ok
        index += 1
    if prev_ok & _UNQUOTED:
        return index, _UNQUOTED
    if prev_ok & _SINGLE:
        return index, _SINGLE
    return index, _DOUBLE


def shlex_quote(word: str) -> str:
    """The ``shlex`` crate's ``quote`` (1.3): what Codex shows for each word of a command."""
    data = word.encode("utf-8")
    if not data:
        return "''"
    out = bytearray()
    while data:
        length, strategy = _quoting_strategy(data)
        if length == len(data) and strategy == _UNQUOTED and not out:
            return word
        chunk, data = data[:length], data[length:]
        if strategy == _UNQUOTED:
            out += chunk
        elif strategy == _SINGLE:
            out += b"'" + chunk + b"'"
        else:
            out += b'"'
            for byte in chunk:
                if byte in b'$`"\\':
                    out += b"\\"
                out.append(byte)
            out += b'"'
    return out.decode("utf-8")


def shlex_join(words: list[str]) -> str:
    return " ".join(shlex_quote(word) for word in words)


# ----------------------------------------------------------------------------------------- misc formatting


def io_error(errno_value: int) -> str:
    """Rust's ``io::Error`` display for an OS error."""
    return f"{os.strerror(errno_value)} (os error {errno_value})"


def utf8_error(data: bytes) -> str | None:
    """Rust's ``Utf8Error`` display for invalid UTF-8 in ``data``; None when it is valid."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason == "unexpected end of data":
            return f"incomplete utf-8 byte sequence from index {exc.start}"
        return f"invalid utf-8 sequence of {exc.end - exc.start} bytes from index {exc.start}"
    return None


def seconds_one_decimal(seconds: float) -> str:
    """How the legacy exec output prints its wall time: rounded to 0.1 s, no trailing ``.0`` (``0``, ``1.2``)."""
    value = math.floor(seconds * 10 + 0.5) / 10
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def decode_lossy(data: bytes) -> str:
    """``String::from_utf8_lossy``: invalid sequences become U+FFFD."""
    return data.decode("utf-8", "replace")


def decode_smart(data: bytes) -> str:
    """The legacy shell tool's decoding: UTF-8, else Windows-1252 (bytes it leaves undefined map to U+0080..)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return "".join(_cp1252(byte) for byte in data)


def _cp1252(byte: int) -> str:
    try:
        return bytes([byte]).decode("cp1252")
    except UnicodeDecodeError:
        return chr(byte)
