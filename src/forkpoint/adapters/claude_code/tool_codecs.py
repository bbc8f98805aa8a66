"""The text codecs Claude Code's file tools apply (pure): how bytes become the text the model sees and back.

Measured on the real 2.1.220 / 2.1.332 binaries: a UTF-8 BOM is dropped and remembered, invalid bytes become
U+FFFD, CRLF reads as LF (a file counts as CRLF when most of its newlines are); a lone surrogate is written as
U+FFFD like Node does; ``toolUseResult.structuredPatch`` holds jsdiff's hunks with 3 lines of context.
"""

from __future__ import annotations

import codecs
import difflib
import re
from typing import Any

_LINES_WITH_ENDS = re.compile(r"[^\n]*\n|[^\n]+$")
_CONTEXT = 3
_EXACT_DIFF_LINES = 5_000
_MAX_DIFF_LINES = 400_000


def decode_text(data: bytes, *, utf16_bom: bool = False) -> tuple[str, bool]:
    """Claude's text decoding: a UTF-8 BOM dropped, invalid bytes as U+FFFD, CRLF -> LF.

    With ``utf16_bom`` a file starting with the UTF-16LE BOM is decoded as UTF-16LE.
    """
    if utf16_bom and data.startswith(b"\xff\xfe"):
        return data[2:].decode("utf-16-le", "replace").replace("\r\n", "\n"), False
    bom = data.startswith(b"\xef\xbb\xbf")
    if bom:
        data = data[3:]
    return data.decode("utf-8", "replace").replace("\r\n", "\n"), bom


def is_valid_utf8(data: bytes, *, partial: bool) -> bool:
    """Strict UTF-8 check; with ``partial`` a character cut at the end of the data does not count."""
    try:
        codecs.getincrementaldecoder("utf-8")("strict").decode(data, final=not partial)
    except UnicodeDecodeError:
        return False
    return True


def uses_crlf(data: bytes) -> bool:
    """Most of the newlines are CRLF (an Edit then writes the file back with CRLF)."""
    crlf = data.count(b"\r\n")
    return crlf > data.count(b"\n") - crlf


def to_utf8(text: str) -> bytes:
    """Encode like Node: a lone surrogate becomes U+FFFD instead of failing."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


def structured_patch(old: str, new: str) -> list[dict[str, Any]]:
    """Hunks like jsdiff's ``structuredPatch`` (3 lines of context) for toolUseResult.structuredPatch.

    Only the span between the common leading and trailing lines is diffed, so an edit of a big file stays cheap;
    a huge changed span becomes one replace hunk.
    """
    a = _LINES_WITH_ENDS.findall(old)
    b = _LINES_WITH_ENDS.findall(new)
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(a), len(b)) - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    low = max(0, prefix - _CONTEXT)
    a_window = a[low : len(a) - max(0, suffix - _CONTEXT)]
    b_window = b[low : len(b) - max(0, suffix - _CONTEXT)]
    if len(a_window) + len(b_window) > _MAX_DIFF_LINES:
        groups = [[("replace", 0, len(a_window), 0, len(b_window))]]
    else:
        # difflib's "popular line" heuristic keeps long windows of repeated lines from going quadratic
        big = len(a_window) + len(b_window) > _EXACT_DIFF_LINES
        matcher = difflib.SequenceMatcher(None, a_window, b_window, autojunk=big)
        groups = [list(group) for group in matcher.get_grouped_opcodes(_CONTEXT)]
    hunks: list[dict[str, Any]] = []
    for group in groups:
        if len(group) == 1 and group[0][0] == "equal":
            continue
        lines: list[str] = []
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                _patch_lines(lines, " ", a_window[a1:a2])
            if tag in ("replace", "delete"):
                _patch_lines(lines, "-", a_window[a1:a2])
            if tag in ("replace", "insert"):
                _patch_lines(lines, "+", b_window[b1:b2])
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        hunk = {"oldStart": low + i1 + 1, "oldLines": i2 - i1, "newStart": low + j1 + 1, "newLines": j2 - j1}
        hunks.append({**hunk, "lines": lines})
    return hunks


def _patch_lines(out: list[str], prefix: str, chunk: list[str]) -> None:
    for line in chunk:
        out.append(prefix + line.removesuffix("\n"))
        if not line.endswith("\n"):
            out.append("\\ No newline at end of file")
