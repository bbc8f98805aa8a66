"""JavaScript string semantics that Claude Code's tool output depends on (it is a JS program).

Lengths and cuts are counted in UTF-16 code units, ``trim`` uses the ECMAScript whitespace set (which differs
from ``str.strip``: no U+001C-U+001F/U+0085, but U+FEFF), and sizes are printed with ``toFixed(1)`` rounding.
"""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

#: ECMAScript WhiteSpace + LineTerminator (what String.prototype.trim removes).
JS_WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)
_WS = "".join(sorted(JS_WHITESPACE))


def js_trim(text: str) -> str:
    return text.strip(_WS)


def js_trim_end(text: str) -> str:
    return text.rstrip(_WS)


def js_len(text: str) -> int:
    """``text.length`` in JavaScript: UTF-16 code units."""
    return len(text) + sum(1 for char in text if ord(char) > 0xFFFF)


def js_slice(text: str, start: int, end: int | None = None) -> str:
    """``text.slice(start, end)`` for non-negative indexes in UTF-16 units.

    A cut through a surrogate pair would leave a lone surrogate (which JSON writers reject), so a character
    split by ``start`` or ``end`` is left out entirely.
    """
    if text.isascii():
        return text[start:end]
    out: list[str] = []
    position = 0
    for char in text:
        width = 2 if ord(char) > 0xFFFF else 1
        if position >= start and (end is None or position + width <= end):
            out.append(char)
        position += width
        if end is not None and position >= end:
            break
    return "".join(out)


def js_last_index_of(text: str, needle: str) -> int:
    """``text.lastIndexOf(needle)`` in UTF-16 units (-1 when absent)."""
    index = text.rfind(needle)
    return -1 if index < 0 else js_len(text[:index])


def strip_leading_blank_lines(text: str) -> str:
    """Drop the leading lines that are empty or whitespace only (JS ``trim() === ''``)."""
    lines = text.split("\n")
    start = 0
    while start < len(lines) and js_trim(lines[start]) == "":
        start += 1
    return "\n".join(lines[start:])


def _fixed1(value: float) -> str:
    """``value.toFixed(1).replace(/\\.0$/, '')`` (toFixed rounds the exact binary value half up)."""
    text = str(Decimal(value).quantize(Decimal("0.1"), rounding=ROUND_HALF_UP))
    return text[:-2] if text.endswith(".0") else text


def format_file_size(size: int) -> str:
    """Claude Code's ``formatFileSize``: bytes below 1 KB, then KB / MB / GB with one decimal."""
    kb = size / 1024
    if kb < 1:
        return f"{size} bytes"
    if kb < 1024:
        return f"{_fixed1(kb)}KB"
    mb = kb / 1024
    if mb < 1024:
        return f"{_fixed1(mb)}MB"
    return f"{_fixed1(mb / 1024)}GB"
