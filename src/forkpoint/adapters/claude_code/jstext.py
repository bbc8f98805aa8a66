"""JavaScript string semantics that Claude Code's tool output depends on (it is a JS program).

Lengths and cuts are counted in UTF-16 code units, ``trim`` uses the ECMAScript whitespace set (which differs
from ``str.strip``: no U+001C-U+001F/U+0085, but U+FEFF), and sizes are printed with ``toFixed(1)`` rounding.
``js_json_parse`` / ``js_json_stringify`` are ``JSON.parse`` / ``JSON.stringify`` (doubles, JS property order and
number text), for the files Claude writes as JSON (notebooks, task lists).
"""

from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

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


class JsJsonError(ValueError):
    """Text that JavaScript's ``JSON.parse`` rejects (or that forkpoint cannot write back like ``JSON.stringify``)."""


_MAX_SAFE = 2**53
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def _reject_constant(name: str) -> Any:
    raise JsJsonError(f"{name} is not JSON")


def js_json_parse(text: str) -> Any:
    """``JSON.parse``: numbers are doubles (a big integer loses its precision as in JS), no NaN/Infinity."""
    try:
        return json.loads(text, parse_int=lambda s: int(s) if abs(int(s)) <= _MAX_SAFE else float(s),
                          parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise JsJsonError(str(exc)) from exc


def js_truthy(value: Any) -> bool:
    """JavaScript truthiness of a parsed JSON value (an empty array or object is truthy, unlike in Python)."""
    if isinstance(value, (list, dict)):
        return True
    return bool(value)


def js_number(value: float | int) -> str:
    """``Number.prototype.toString`` for a finite double (shortest round trip, JS exponent rules)."""
    number = float(value)
    if number == 0:
        return "0"
    if number.is_integer() and abs(number) <= _MAX_SAFE:
        return str(int(number))
    digits_tuple = Decimal(repr(abs(number))).normalize().as_tuple()
    digits = "".join(map(str, digits_tuple.digits))
    exponent = digits_tuple.exponent
    assert isinstance(exponent, int)
    k, n = len(digits), exponent + len(digits)
    sign = "-" if number < 0 else ""
    if k <= n <= 21:
        return sign + digits + "0" * (n - k)
    if 0 < n <= 21:
        return sign + digits[:n] + "." + digits[n:]
    if -6 < n <= 0:
        return sign + "0." + "0" * (-n) + digits
    mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
    return f"{sign}{mantissa}e{'+' if n - 1 >= 0 else '-'}{abs(n - 1)}"


def _js_string(value: str) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return _LONE_SURROGATE.sub(lambda match: f"\\u{ord(match.group(0)):04x}", text)


def _js_keys(value: dict[str, Any]) -> list[str]:
    """Property order of a JS object: array-index keys ascending first, then the rest in insertion order."""
    indexes = sorted((key for key in value if _ARRAY_INDEX.fullmatch(key) and int(key) < 2**32 - 1), key=int)
    return indexes + [key for key in value if key not in set(indexes)]


def js_json_stringify(value: Any, indent: int, _level: int = 0) -> str:
    """``JSON.stringify(value, null, indent)`` for parsed JSON values (``None`` values of a dict are kept as null)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, (int, float)):
        return js_number(value)
    if isinstance(value, str):
        return _js_string(value)
    inner = "\n" + " " * (indent * (_level + 1))
    outer = "\n" + " " * (indent * _level)
    if isinstance(value, list):
        if not value:
            return "[]"
        return "[" + ",".join(inner + js_json_stringify(item, indent, _level + 1) for item in value) + outer + "]"
    if isinstance(value, dict):
        if not value:
            return "{}"
        items = (inner + _js_string(key) + ": " + js_json_stringify(value[key], indent, _level + 1)
                 for key in _js_keys(value))
        return "{" + ",".join(items) + outer + "}"
    raise JsJsonError(f"not a JSON value: {type(value).__name__}")
