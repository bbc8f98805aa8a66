"""Codex's ``apply_patch``, re-implemented: the patch grammar, the matching, the file effects and every text.

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

Results: ``Exit code: 0\\nWall time: 0 seconds\\nOutput:\\nSuccess. Updated the following files:\\n`` then
``A``/``M``/``D`` lines (added, then modified, then deleted; paths as written, a move shows its destination).
Everything is verified before anything is written: a failure is ``apply_patch verification failed: <reason>``
and nothing changes. A write that fails later gives ``Exit code: 1`` and ``Failed to write file <abs>``.

Line endings differ by version: 0.149 splits on ``\\n`` (a CRLF file keeps ``\\r`` only on untouched lines and
an update can drop one of several trailing empty lines); 0.171 keeps each line's ending, gives new lines the
file's first ending, and keeps trailing empty lines (its ``CODEX_APPLY_PATCH_PRESERVE_LINE_ENDINGS``).

Confinement (forkpoint's, not Codex's): every path of the patch must lie in the workspace, checked for the whole
patch before anything happens; reads and writes go through ``forkpoint.fs`` so a symlink cannot lead outside.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from forkpoint.adapters.codex.tool_text import io_error, rust_lines, seconds_one_decimal, utf8_error
from forkpoint.errors import ErrorKind, ReplayError
from forkpoint.fs import (
    DEFAULT_MAX_INPUT_BYTES,
    ConfinementError,
    NotRegularFileError,
    open_confined,
    read_regular_file,
    write_file_confined,
)

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
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _invalid_patch(message: str) -> PatchParseError:
    return PatchParseError(f"invalid patch: {message}")


def _invalid_hunk(message: str, line_number: int) -> PatchParseError:
    return PatchParseError(f"invalid hunk at line {line_number}, {message}")


@dataclass
class Chunk:
    context: str | None
    old_lines: list[str] = field(default_factory=list)
    new_lines: list[str] = field(default_factory=list)
    is_end_of_file: bool = False


@dataclass
class Hunk:
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
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


Replacement = tuple[int, int, list[str]]


def compute_replacements(lines: list[str], shown: str, chunks: list[Chunk]) -> list[Replacement]:
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


# ----------------------------------------------------------------------------------------- applying


@dataclass(frozen=True)
class PatchResult:
    content: str
    exit_code: int | None  # None when Codex refused the patch before running it
    changed: tuple[str, ...] = ()


def join_path(cwd: str, path: str) -> str:
    """Rust's ``Path::join`` as displayed: an absolute path replaces ``cwd``, otherwise one ``/`` separates."""
    if path.startswith("/"):
        return path
    return cwd + path if cwd.endswith("/") else f"{cwd}/{path}"


def _path_key(path: str) -> str:
    """Rust compares paths by components: empty and ``.`` components (but not a leading ``.``) do not count."""
    parts = [part for index, part in enumerate(path.split("/")) if part not in ("", ".") or (index == 0 and part)]
    return ("/" if path.startswith("/") else "") + "/".join(parts)


def _inside(root: Path, absolute: str, aliases: tuple[str, ...] = ()) -> bool:
    normal = os.path.normpath(absolute)
    for base in {os.path.normpath(os.path.abspath(root)), os.path.realpath(root), *map(os.path.normpath, aliases)}:
        if normal == base or normal.startswith(base.rstrip("/") + "/"):
            return True
    return False


class ApplyPatch:
    """Applies one patch in ``root`` (the workspace, which is also Codex's cwd for the patch).

    In a sandbox, ``cwd`` is the session cwd as the tools see it (under bwrap the recorded cwd), ``aliases`` the
    spellings of the workspace that are not its host path (resolved by forkpoint's confined walk) and
    ``host_path`` maps a path the tools see to the host (for existence checks); texts name the tools' paths.
    """

    def __init__(
        self,
        root: Path,
        preserve_line_endings: bool,
        *,
        cwd: str | None = None,
        aliases: tuple[str, ...] = (),
        host_path: Callable[[str], str] | None = None,
    ) -> None:
        self.root = root
        self.cwd = cwd if cwd is not None else os.path.abspath(root)
        self.aliases = aliases
        self._host: Callable[[str], str] = host_path if host_path is not None else (lambda path: path)
        self.preserve_line_endings = preserve_line_endings

    def run(self, text: str) -> PatchResult:
        started = time.monotonic()
        try:
            hunks = parse_patch(text)
        except PatchParseError as error:
            return PatchResult(VERIFICATION_FAILED + error.message, None)
        if not hunks:
            return PatchResult(EMPTY_PATCH, None)
        self._confine(hunks)
        seen: set[str] = set()
        for hunk in hunks:
            key = _path_key(join_path(self.cwd, hunk.path))
            if key in seen:
                message = f"invalid patch: multiple operations target {join_path(self.cwd, hunk.path)}"
                return PatchResult(VERIFICATION_FAILED + message, None)
            seen.add(key)
        try:
            for hunk in hunks:
                self._verify(hunk)
        except PatchVerifyError as error:
            return PatchResult(VERIFICATION_FAILED + error.message, None)
        except ConfinementError as error:
            raise ReplayError(ErrorKind.EXECUTOR, f"apply_patch: {error}", before_effect=True) from error
        return self._apply(hunks, started)

    def _confine(self, hunks: list[Hunk]) -> None:
        for hunk in hunks:
            for path in (hunk.path, hunk.move_path):
                if path is not None and not _inside(self.root, join_path(self.cwd, path), self.aliases):
                    raise ReplayError(
                        ErrorKind.EXECUTOR,
                        f"apply_patch path {path!r} is outside the workspace {self.cwd}; nothing was changed",
                        before_effect=True,
                    )

    def _read(self, absolute: str, context: str) -> str:
        try:
            result = read_regular_file(self.root, absolute, max_bytes=DEFAULT_MAX_INPUT_BYTES, aliases=self.aliases)
        except ConfinementError:
            raise
        except NotRegularFileError as error:
            raise PatchVerifyError(f"{context} {absolute}: path `{absolute}` is not a file") from error
        except OSError as error:
            code = error.errno if error.errno is not None else errno.EIO
            raise PatchVerifyError(f"{context} {absolute}: {io_error(code)}") from error
        if result.truncated:
            raise ReplayError(ErrorKind.EXECUTOR, f"apply_patch: {absolute} is too large", before_effect=True)
        problem = utf8_error(result.data)
        if problem is not None:
            raise PatchVerifyError(f"{context} {absolute}: {problem}")
        return result.data.decode("utf-8")

    def _updated(self, hunk: Hunk) -> str:
        absolute = join_path(self.cwd, hunk.path)
        original = self._read(absolute, "Failed to read file to update")
        return updated_contents(original, absolute, hunk.chunks, self.preserve_line_endings)

    def _verify(self, hunk: Hunk) -> None:
        """Check one hunk against the files as they are before anything is written."""
        if hunk.kind == "delete":
            self._read(join_path(self.cwd, hunk.path), "Failed to read")
        elif hunk.kind == "update":
            self._updated(hunk)

    def _apply(self, hunks: list[Hunk], started: float) -> PatchResult:
        """Apply the hunks in order; an update is computed again from the file as earlier hunks left it
        (measured: a move onto a file that a later hunk updates makes that hunk fail with exit code 1)."""
        added: list[str] = []
        modified: list[str] = []
        deleted: list[str] = []
        changed: list[str] = []
        for hunk in hunks:
            absolute = join_path(self.cwd, hunk.path)
            try:
                new_contents = self._updated(hunk) if hunk.kind == "update" else None
                if hunk.kind == "add":
                    self._write(absolute, hunk.contents)
                    added.append(hunk.path)
                    changed.append(absolute)
                elif hunk.kind == "delete":
                    self._unlink(absolute, f"Failed to delete file {absolute}")
                    deleted.append(hunk.path)
                    changed.append(absolute)
                elif hunk.move_path is not None:
                    destination = join_path(self.cwd, hunk.move_path)
                    self._write(destination, new_contents or "")
                    changed.append(destination)
                    self._unlink(absolute, f"Failed to remove original {absolute}")
                    modified.append(hunk.move_path)
                    changed.append(absolute)
                else:
                    self._write(absolute, new_contents or "")
                    modified.append(hunk.path)
                    changed.append(absolute)
            except (_ApplyFailure, PatchVerifyError) as failure:
                wall = seconds_one_decimal(time.monotonic() - started)
                return PatchResult(f"Exit code: 1\nWall time: {wall} seconds\nOutput:\n{failure}\n", 1, tuple(changed))
            except ConfinementError as error:
                raise ReplayError(
                    ErrorKind.EXECUTOR, f"apply_patch: {error}", before_effect=not changed
                ) from error
        summary = ["Success. Updated the following files:"]
        summary += [f"A {path}" for path in added] + [f"M {path}" for path in modified]
        summary += [f"D {path}" for path in deleted]
        wall = seconds_one_decimal(time.monotonic() - started)
        body = "\n".join(summary) + "\n"
        return PatchResult(f"Exit code: 0\nWall time: {wall} seconds\nOutput:\n{body}", 0, tuple(changed))

    def _write(self, absolute: str, contents: str) -> None:
        parent = os.path.dirname(absolute)
        parent_existed = os.path.lexists(self._host(parent))
        try:
            write_file_confined(
                self.root, absolute, contents.encode("utf-8"), create_parents=True, aliases=self.aliases
            )
        except (ConfinementError, ReplayError):
            raise
        except (OSError, NotRegularFileError) as error:
            if not parent_existed and not os.path.isdir(self._host(parent)):
                raise _ApplyFailure(f"Failed to create parent directories for {absolute}") from error
            raise _ApplyFailure(f"Failed to write file {absolute}") from error

    def _unlink(self, absolute: str, message: str) -> None:
        parent, name = os.path.split(absolute)
        try:
            fd = open_confined(self.root, parent, os.O_RDONLY | os.O_DIRECTORY, aliases=self.aliases)
        except ConfinementError:
            raise
        except OSError as error:
            raise _ApplyFailure(message) from error
        try:
            os.unlink(name, dir_fd=fd)
        except OSError as error:
            raise _ApplyFailure(message) from error
        finally:
            os.close(fd)


class _ApplyFailure(Exception):
    pass
