"""Codex's ``apply_patch`` grammar and matching, re-implemented (pure: text in, hunks or new file text out).

Grammar (Codex's parser, measured on 0.149.0 / 0.171.0)::

    *** Begin Patch
    *** Add File: <path>          then lines "+<text>"
    *** Delete File: <path>
    *** Update File: <path>       optionally "*** Move to: <path>", then chunks:
    @@ [<one context line>]        (the first chunk may omit "@@"), lines " ctx" / "-old" / "+new",
                                   optionally "*** End of File"
    *** End Patch

The whole text is trimmed first, lines are split like Rust's ``str::lines`` (a ``\\r`` before ``\\n`` goes),
and a ``<<'EOF'`` … ``EOF`` heredoc wrapper is accepted. A chunk is located with Codex's ``seek_sequence``: exact,
then ignoring trailing whitespace, then ignoring surrounding whitespace, then with typographic punctuation
folded to ASCII; its context line (``@@ ctx``) must be found first; ``*** End of File`` anchors at the end.

Line endings differ by version: 0.149 splits on ``\\n`` (a CRLF file keeps ``\\r`` only on untouched lines and
an update can drop one of several trailing empty lines); 0.171 keeps each line's ending, gives new lines the
file's first ending, and keeps trailing empty lines (its ``CODEX_APPLY_PATCH_PRESERVE_LINE_ENDINGS``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from forkpoint.adapters.codex.tool_text import rust_lines

BEGIN_PATCH = "*** Begin Patch"
END_PATCH = "*** End Patch"
ADD_FILE = "*** Add File: "
DELETE_FILE = "*** Delete File: "
UPDATE_FILE = "*** Update File: "
MOVE_TO = "*** Move to: "
END_OF_FILE = "*** End of File"
VERIFICATION_FAILED = "apply_patch verification failed: "
EMPTY_PATCH = "patch rejected: empty patch"

#: Rust's ``char::is_whitespace`` (Python's ``str.isspace`` also counts \x1c-\x1f).
_RUST_WHITESPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + (
    "\u2028\u2029\u202f\u205f\u3000"
)
_PUNCTUATION = str.maketrans(
    {
        **dict.fromkeys("\u2010\u2011\u2012\u2013\u2014\u2015\u2212", "-"),
        **dict.fromkeys("\u2018\u2019\u201a\u201b", "'"),
        **dict.fromkeys("\u201c\u201d\u201e\u201f", '"'),
        **dict.fromkeys(
            "\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000",
            " ",
        ),
    }
)


def _trim(text: str) -> str:
    return text.strip(_RUST_WHITESPACE)


def _trim_end(text: str) -> str:
    return text.rstrip(_RUST_WHITESPACE)


# ----------------------------------------------------------------------------------------- parsing


class PatchParseError(Exception):
    """The patch text is not valid ``apply_patch`` grammar; ``message`` is Codex's wording."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _invalid_patch(message: str) -> PatchParseError:
    return PatchParseError(f"invalid patch: {message}")


def _invalid_hunk(message: str, line_number: int) -> PatchParseError:
    return PatchParseError(f"invalid hunk at line {line_number}, {message}")


@dataclass
class Chunk:
    """One ``@@`` section of an update: its context line, the lines it replaces and the lines it puts instead."""

    context: str | None
    old_lines: list[str] = field(default_factory=list)
    new_lines: list[str] = field(default_factory=list)
    is_end_of_file: bool = False


@dataclass
class Hunk:
    """One file operation of a patch (an add carries its ``contents``, an update its ``chunks``)."""

    kind: str  # "add" | "delete" | "update"
    path: str
    contents: str = ""
    move_path: str | None = None
    chunks: list[Chunk] = field(default_factory=list)


def _check_boundaries(lines: list[str]) -> None:
    first = lines[0] if lines else None
    last = lines[-1] if lines else None
    if first == BEGIN_PATCH and last == END_PATCH:
        return
    if first is not None and first != BEGIN_PATCH:
        raise _invalid_patch(f"The first line of the patch must be '{BEGIN_PATCH}'")
    raise _invalid_patch(f"The last line of the patch must be '{END_PATCH}'")


def parse_patch(text: str) -> list[Hunk]:
    """The hunks of a patch text; ``PatchParseError`` with Codex's message when the grammar is broken."""
    lines = rust_lines(_trim(text))
    try:
        _check_boundaries(lines)
    except PatchParseError:
        heredoc = len(lines) >= 4 and lines[0] in ("<<EOF", "<<'EOF'", '<<"EOF"') and lines[-1].endswith("EOF")
        if not heredoc:
            raise
        lines = lines[1:-1]
        _check_boundaries(lines)
    hunks: list[Hunk] = []
    remaining = lines[1:-1]
    line_number = 2
    while remaining:
        hunk, consumed = _parse_hunk(remaining, line_number)
        hunks.append(hunk)
        line_number += consumed
        remaining = remaining[consumed:]
    return hunks


def _parse_hunk(lines: list[str], line_number: int) -> tuple[Hunk, int]:
    first = _trim(lines[0])
    if first.startswith(ADD_FILE):
        contents: list[str] = []
        for line in lines[1:]:
            if not line.startswith("+"):
                break
            contents.append(line[1:] + "\n")
        return Hunk("add", first[len(ADD_FILE) :], contents="".join(contents)), 1 + len(contents)
    if first.startswith(DELETE_FILE):
        return Hunk("delete", first[len(DELETE_FILE) :]), 1
    if first.startswith(UPDATE_FILE):
        path = first[len(UPDATE_FILE) :]
        remaining = lines[1:]
        consumed = 1
        move_path = None
        if remaining and remaining[0].startswith(MOVE_TO):
            move_path = remaining[0][len(MOVE_TO) :]
            remaining = remaining[1:]
            consumed += 1
        chunks: list[Chunk] = []
        while remaining:
            if not _trim(remaining[0]):
                consumed += 1
                remaining = remaining[1:]
                continue
            if remaining[0].startswith("***"):
                break
            chunk, used = _parse_chunk(remaining, line_number + consumed, not chunks)
            chunks.append(chunk)
            consumed += used
            remaining = remaining[used:]
        if not chunks:
            raise _invalid_hunk(f"Update file hunk for path '{path}' is empty", line_number)
        return Hunk("update", path, move_path=move_path, chunks=chunks), consumed
    raise _invalid_hunk(
        f"'{first}' is not a valid hunk header. Valid hunk headers: '*** Add File: {{path}}', "
        "'*** Delete File: {path}', '*** Update File: {path}'",
        line_number,
    )


def _parse_chunk(lines: list[str], line_number: int, allow_missing_context: bool) -> tuple[Chunk, int]:
    if lines[0] == "@@":
        chunk, start = Chunk(None), 1
    elif lines[0].startswith("@@ "):
        chunk, start = Chunk(lines[0][3:]), 1
    else:
        if not allow_missing_context:
            raise _invalid_hunk(
                f"Expected update hunk to start with a @@ context marker, got: '{lines[0]}'", line_number
            )
        chunk, start = Chunk(None), 0
    if start >= len(lines):
        raise _invalid_hunk("Update hunk does not contain any lines", line_number + start)
    parsed = 0
    for line in lines[start:]:
        if line == END_OF_FILE:
            if parsed == 0:
                raise _invalid_hunk("Update hunk does not contain any lines", line_number + start)
            chunk.is_end_of_file = True
            parsed += 1
            break
        marker = line[:1]
        if marker == "":
            chunk.old_lines.append("")
            chunk.new_lines.append("")
        elif marker == " ":
            chunk.old_lines.append(line[1:])
            chunk.new_lines.append(line[1:])
        elif marker == "+":
            chunk.new_lines.append(line[1:])
        elif marker == "-":
            chunk.old_lines.append(line[1:])
        else:
            if parsed == 0:
                raise _invalid_hunk(
                    f"Unexpected line found in update hunk: '{line}'. Every line should start with ' ' (context "
                    "line), '+' (added line), or '-' (removed line)",
                    line_number + start,
                )
            break
        parsed += 1
    return chunk, parsed + start


# ----------------------------------------------------------------------------------------- matching


def seek_sequence(lines: list[str], pattern: list[str], start: int, eof: bool) -> int | None:
    """Codex's ``seek_sequence``: the first index at or after ``start`` where ``pattern`` matches, by decreasing
    strictness (exact, trailing whitespace ignored, surrounding whitespace ignored, punctuation folded)."""
    if not pattern:
        return start
    if len(pattern) > len(lines):
        return None
    search_start = len(lines) - len(pattern) if eof else start
    positions = range(search_start, len(lines) - len(pattern) + 1)
    comparisons = (
        lambda text: text,
        _trim_end,
        _trim,
        lambda text: _trim(text).translate(_PUNCTUATION),
    )
    for normalise in comparisons:
        wanted = [normalise(line) for line in pattern]
        for index in positions:
            if all(normalise(lines[index + offset]) == wanted[offset] for offset in range(len(pattern))):
                return index
    return None


class PatchVerifyError(Exception):
    """The patch does not apply to the file as it is; ``message`` is Codex's wording."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


Replacement = tuple[int, int, list[str]]


def compute_replacements(lines: list[str], shown: str, chunks: list[Chunk]) -> list[Replacement]:
    """Where each chunk applies, as (start, old length, new lines) sorted by start; ``PatchVerifyError`` naming
    ``shown`` (the file as the message shows it) when a context or the old lines cannot be found."""
    replacements: list[Replacement] = []
    line_index = 0
    for chunk in chunks:
        if chunk.context is not None:
            found = seek_sequence(lines, [chunk.context], line_index, False)
            if found is None:
                raise PatchVerifyError(f"Failed to find context '{chunk.context}' in {shown}")
            line_index = found + 1
        if not chunk.old_lines:
            insertion = len(lines) - 1 if lines and lines[-1] == "" else len(lines)
            replacements.append((insertion, 0, list(chunk.new_lines)))
            continue
        pattern = chunk.old_lines
        new_slice = chunk.new_lines
        found = seek_sequence(lines, pattern, line_index, chunk.is_end_of_file)
        if found is None and pattern[-1] == "":
            pattern = pattern[:-1]
            if new_slice and new_slice[-1] == "":
                new_slice = new_slice[:-1]
            found = seek_sequence(lines, pattern, line_index, chunk.is_end_of_file)
        if found is None:
            old = "\n".join(chunk.old_lines)
            raise PatchVerifyError(f"Failed to find expected lines in {shown}:\n{old}")
        replacements.append((found, len(pattern), list(new_slice)))
        line_index = found + len(pattern)
    replacements.sort(key=lambda item: item[0])
    return replacements


def updated_contents(original: str, shown: str, chunks: list[Chunk], preserve_line_endings: bool) -> str:
    """The file's new text after the chunks (0.149: LF joins; 0.171: each line keeps its ending)."""
    if not preserve_line_endings:
        lines = original.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        result = lines
        for start, old_len, new in reversed(compute_replacements(lines, shown, chunks)):
            result[start : start + old_len] = new
        if not result or result[-1] != "":
            result.append("")
        return "\n".join(result)
    texts: list[str] = []
    endings: list[str | None] = []
    preferred: str | None = None
    position = 0
    while (newline := original.find("\n", position)) >= 0:
        line = original[position:newline]
        ending = "\r\n" if line.endswith("\r") else "\n"
        texts.append(line[:-1] if ending == "\r\n" else line)
        endings.append(ending)
        preferred = preferred or ending
        position = newline + 1
    if position < len(original):
        texts.append(original[position:])
        endings.append(None)
    line_ending = preferred or "\n"
    out_texts: list[str] = []
    out_endings: list[str | None] = []
    source = 0
    for start, old_len, new in compute_replacements(texts, shown, chunks):
        out_texts += texts[source:start]
        out_endings += endings[source:start]
        out_texts += new
        out_endings += [line_ending] * len(new)
        source = max(source, start + old_len)
    out_texts += texts[source:]
    out_endings += endings[source:]
    return "".join(text + (ending or line_ending) for text, ending in zip(out_texts, out_endings, strict=True))
