"""Claude Code's Read, Write and Edit tools, re-executed inside the workspace with their own output text.

Every rule here was measured on the real 2.1.220 / 2.1.332 binaries (scripted model):

Read
- ``N\\t<line>`` per line, lines split on ``\\n`` after CRLF -> LF and a UTF-8 BOM dropped, so a file ending in a
  newline shows an empty last line; numbering starts at ``offset`` (``offset: 0`` numbers from 0 but reads from
  line 1); ``limit`` 0 means no limit; no 2,000-line or per-line cut.
- No ``limit`` and more than 256 KiB on disk: a size error (2.1.332 also accepts ``allow_large: true``).
- An empty file / an offset past the end give ``<system-reminder>`` warnings (not errors); a missing file
  ``File does not exist. Note: your current working directory is <shell cwd>.`` (+ ``Did you mean <name>?``
  for a sibling with the same stem); a directory ``EISDIR: illegal operation on a directory, read '<path>'``.
- 2.1.220 answers a repeated Read of an unchanged file with the same range with a "file unchanged" stub.
- Relative paths resolve against the Bash shell's current directory.
- Paths are the ones the tools see: under ``--sandbox bwrap`` the recorded cwd is the workspace (an alias the
  confined walk maps to the real workspace), so recorded absolute paths resolve unchanged.
- forkpoint's own budgets apply only beyond that: at most 16 MiB (+1 probe byte) are scanned and 4 MiB
  returned; a cut appends one ``[Read truncated by forkpoint replay: ...]`` line and sets ``truncated``.

Write / Edit
- The session remembers what the model saw of each file (Read, Write, Edit). A file changed on disk since
  (other mtime and, for a full view, other content) refuses Write and an Edit whose ``old_string`` is gone
  (``File has been modified since read ...``); an Edit that still applies adds a note instead.
- 2.1.220 refuses Write over an existing file the session has not seen. Edit never needs a Read.
- Edit: ``old_string`` matched literally or with curly quotes straightened; trailing whitespace stripped from
  ``new_string`` lines except in Markdown; ``new_string`` "" also eats the following newline; CRLF files stay
  CRLF. Write writes the content as is and creates parent directories.
"""

from __future__ import annotations

import codecs
import difflib
import errno
import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.adapters.claude_code import tool_media
from forkpoint.adapters.claude_code.jstext import format_file_size, js_trim, js_trim_end
from forkpoint.adapters.claude_code.tool_profile import ToolOutcome, ToolProfile, tool_error, tool_use_error
from forkpoint.errors import ErrorKind, ReplayError
from forkpoint.fs import (
    ConfinementError,
    NotRegularFileError,
    open_confined,
    read_regular_file,
    write_file_confined,
)
from forkpoint.sandbox import local_sandbox

if TYPE_CHECKING:
    from forkpoint.sandbox.base import Sandbox

READ_SCAN_BUDGET = 16 * 1024 * 1024
READ_OUTPUT_BUDGET = 4 * 1024 * 1024
EDIT_BUDGET = 16 * 1024 * 1024
MAX_READ_BYTES_WITHOUT_LIMIT = 256 * 1024
SCAN_NOTICE = (
    f"[Read truncated by forkpoint replay: only the first {READ_SCAN_BUDGET} bytes of the file were scanned; "
    "the requested lines continue past them]"
)
OUTPUT_NOTICE = f"[Read truncated by forkpoint replay: the output exceeds {READ_OUTPUT_BUDGET} bytes]"
CONTEXT_NOTE = " (file state is current in your context — no need to Read it back)"
STALE_NOTE = (
    " (note: the file had been modified on disk since you last read it — the edit applied cleanly, but the file "
    "contains other changes not in your context. Read it before edits that depend on surrounding content.)"
)
MODIFIED_SINCE_READ = (
    "File has been modified since read, either by the user or by a linter. Read it again before attempting to "
    "write it."
)
NOT_READ_YET = "File has not been read yet. Read it first before writing to it."
FILE_UNCHANGED = "Wasted call — file unchanged since your last Read. Refer to that earlier tool_result instead."



def _extensions(names: str) -> frozenset[str]:
    return frozenset(names.split())


#: Claude Code refuses these extensions in Read (images, PDFs and notebooks have their own readers).
BINARY_EXTENSIONS = _extensions(
    ".mp4 .mov .avi .mkv .webm .wmv .flv .m4v .mpeg .mpg .mp3 .wav .ogg .flac .aac .m4a .wma .aiff .opus "
    ".zip .tar .gz .bz2 .7z .rar .xz .z .tgz .iso .exe .dll .so .dylib .bin .o .a .obj .lib .app .msi .deb .rpm "
    ".doc .docx .xls .xlsx .ppt .pptx .odt .ods .odp .ttf .otf .woff .woff2 .eot .pyc .pyo .class .jar .war .ear "
    ".node .wasm .rlib .sqlite .sqlite3 .db .mdb .idx .psd .ai .eps .sketch .fig .xd .blend .3ds .max .swf .fla "
    ".lockb .dat .data"
)
#: Read turns these into image / document / notebook blocks (tool_media: what is reproduced, what stays stale).
SPECIAL_READ_EXTENSIONS = _extensions(".png .jpg .jpeg .gif .webp .bmp .ico .tiff .tif .pdf .ipynb")
MARKDOWN_EXTENSIONS = frozenset({".md", ".mdx"})
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})
_LINES_WITH_ENDS = re.compile(r"[^\n]*\n|[^\n]+$")
_CONTEXT = 3
_EXACT_DIFF_LINES = 5_000
_MAX_DIFF_LINES = 400_000
_NODE_MESSAGES = {
    errno.EACCES: "permission denied",
    errno.ELOOP: "too many symbolic links encountered",
    errno.ENAMETOOLONG: "name too long",
    errno.EPERM: "operation not permitted",
}


@dataclass
class FileState:
    """What the session knows about one file (Claude's readFileState)."""

    text: str | None  # the content as last seen (CRLF -> LF), None when only part was scanned
    mtime_ns: int | None
    from_read: bool
    offset: int | None = None
    limit: int | None = None
    in_context: bool = True  # the model has seen the whole current content


@dataclass
class _Loaded:
    kind: str  # "file" | "missing" | "directory"
    raw: bytes = b""
    text: str = ""
    bom: bool = False
    crlf: bool = False
    mtime_ns: int | None = None


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


def _uses_crlf(data: bytes) -> bool:
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


def _int_arg(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _node_error(exc: OSError, path: str, syscall: str = "open") -> str:
    code = errno.errorcode.get(exc.errno or 0, "EIO")
    message = _NODE_MESSAGES.get(exc.errno or 0, (exc.strerror or str(exc)).lower())
    return f"{code}: {message}, {syscall} '{path}'"


class FileTools:
    """Read, Write and Edit of one session, sharing Claude's per-file state."""

    def __init__(
        self,
        workspace: Path,
        profile: ToolProfile,
        cwd: Callable[[], str],
        home: str | None,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.workspace = workspace
        # Paths are handled as the tools see them (under bwrap: the recorded cwd); only the fs calls and
        # metadata lookups go to the host, through the confined walk (which knows the alias) or host_path.
        self.sandbox = sandbox or local_sandbox(workspace)
        self.roots = self.sandbox.roots
        host_roots = (os.path.abspath(workspace), os.path.realpath(workspace))
        self.aliases = tuple(root for root in self.roots if root not in host_roots)
        self._host = self.sandbox.host_path
        self.profile = profile
        self.cwd = cwd
        self.home = home
        self.states: dict[str, FileState] = {}

    # ------------------------------------------------------------------ paths

    def _path_arg(self, tool: str, arguments: dict[str, Any], name: str = "file_path") -> str:
        value = arguments.get(name)
        if not isinstance(value, str) or not value or "\0" in value:
            raise ReplayError(
                ErrorKind.EXECUTOR, f"{tool} call has no usable {name}; Claude Code would reject it", before_effect=True
            )
        return value

    def resolve(self, tool: str, path: str) -> str:
        """The absolute path Claude would use (``~`` = HOME, relative = shell cwd); refused outside the workspace."""
        expanded = path
        if self.home is not None and (path == "~" or path.startswith("~/")):
            expanded = self.home + path[1:]
        absolute = os.path.normpath(os.path.join(self.cwd(), expanded))
        if not any(absolute == root or absolute.startswith(root.rstrip("/") + "/") for root in self.roots):
            raise ReplayError(
                ErrorKind.EXECUTOR,
                f"Claude Code {tool} of {path!r} lies outside the workspace; forkpoint does not touch it",
                before_effect=True,
            )
        return absolute

    def _escaped(self, tool: str, path: str, absolute: str) -> ToolOutcome:
        """A symlink led outside: a non-regular target is an ordinary tool error, a regular file a refusal."""
        try:
            target = os.stat(self._host(absolute))  # metadata only, nothing outside is opened
        except OSError:
            target = None
        if target is not None and stat.S_ISDIR(target.st_mode):
            return tool_error(f"EISDIR: illegal operation on a directory, read '{absolute}'")
        if target is not None and not stat.S_ISREG(target.st_mode):
            return self._not_regular(tool, absolute)
        raise ReplayError(
            ErrorKind.EXECUTOR,
            f"Claude Code {tool} of {path!r} resolves outside the workspace (symlink); forkpoint does not follow it",
            before_effect=True,
        )

    @staticmethod
    def _not_regular(tool: str, absolute: str) -> ToolOutcome:
        """A FIFO, device or socket: Claude would block or read forever; forkpoint reports a tool error."""
        return tool_error(f"{tool} refused by forkpoint replay: {absolute} is not a regular file")

    def _missing(self, absolute: str) -> str:
        message = f"File does not exist. Note: your current working directory is {self.cwd()}."
        similar = self._similar_name(absolute)
        return message + (f" Did you mean {similar}?" if similar else "")

    def _similar_name(self, absolute: str) -> str | None:
        directory, name = os.path.split(absolute)
        stem = os.path.splitext(name)[0]
        try:
            fd = open_confined(self.workspace, directory, os.O_RDONLY | os.O_DIRECTORY, aliases=self.aliases)
        except (OSError, ConfinementError):
            return None
        try:
            entries = os.listdir(fd)
        except OSError:
            return None
        finally:
            os.close(fd)
        return next((entry for entry in entries if entry != name and os.path.splitext(entry)[0] == stem), None)

    def _mtime(self, absolute: str) -> int | None:
        try:
            return os.stat(self._host(absolute)).st_mtime_ns
        except OSError:
            return None

    def _load(self, tool: str, path: str, absolute: str) -> _Loaded | ToolOutcome:
        """The current file for Write/Edit, or the tool error Claude would give."""
        try:
            result = read_regular_file(self.workspace, absolute, max_bytes=EDIT_BUDGET, aliases=self.aliases)
        except ConfinementError:
            outcome = self._escaped(tool, path, absolute)
            return _Loaded("directory") if outcome.content.startswith("EISDIR") else outcome
        except (FileNotFoundError, NotADirectoryError):
            return _Loaded("missing")
        except NotRegularFileError:
            if os.path.isdir(self._host(absolute)):
                return _Loaded("directory")
            return self._not_regular(tool, absolute)
        except OSError as exc:
            return tool_error(_node_error(exc, absolute))
        if result.truncated:
            raise ReplayError(
                ErrorKind.EXECUTOR,
                f"Claude Code {tool} of {path!r}: the file is larger than forkpoint's {EDIT_BUDGET}-byte edit budget",
                before_effect=True,
            )
        text, bom = decode_text(result.data)
        return _Loaded("file", result.data, text, bom, _uses_crlf(result.data), self._mtime(absolute))

    def _stale(self, state: FileState, current: _Loaded) -> bool:
        """Changed on disk since the session last saw it (an mtime change alone does not count for full views)."""
        if current.mtime_ns == state.mtime_ns:
            return False
        return not (state.in_context and state.text is not None and state.text == current.text)

    def _write(self, tool: str, path: str, absolute: str, data: bytes) -> int | ToolOutcome | None:
        """Write (creating parents); the new mtime, or the tool error when the file system refuses."""
        try:
            write_file_confined(self.workspace, absolute, data, create_parents=True, aliases=self.aliases)
        except ConfinementError as exc:
            raise ReplayError(
                ErrorKind.EXECUTOR, f"Claude Code {tool} of {path!r} resolves outside the workspace: {exc}"
            ) from exc
        except OSError as exc:  # e.g. a parent that is a regular file
            return tool_error(_node_error(exc, absolute))
        return self._mtime(absolute)

    # ------------------------------------------------------------------ Read

    def read(self, arguments: dict[str, Any]) -> ToolOutcome:
        path = self._path_arg("Read", arguments)
        absolute = self.resolve("Read", path)
        extension = os.path.splitext(absolute)[1].lower()
        if extension in SPECIAL_READ_EXTENSIONS:
            return self._read_media(path, absolute)
        if extension in BINARY_EXTENSIONS:
            return tool_use_error(self.profile.binary_file_error.format(ext=extension))
        offset = _int_arg(arguments.get("offset"))
        limit = _int_arg(arguments.get("limit"))
        start_line = 1 if offset is None else offset
        line_limit = limit if limit is not None and limit > 0 else None
        try:
            result = read_regular_file(self.workspace, absolute, max_bytes=READ_SCAN_BUDGET, aliases=self.aliases)
        except ConfinementError:
            return self._escaped("Read", path, absolute)
        except (FileNotFoundError, NotADirectoryError):
            return tool_error(self._missing(absolute))
        except NotRegularFileError:
            if os.path.isdir(self._host(absolute)):
                return tool_error(f"EISDIR: illegal operation on a directory, read '{absolute}'")
            return self._not_regular("Read", absolute)
        except OSError as exc:
            return tool_error(_node_error(exc, absolute))
        mtime = self._mtime(absolute)
        state = self.states.get(absolute)
        if (
            self.profile.read_dedup
            and state is not None
            and state.from_read
            and state.offset == start_line
            and state.limit == line_limit
            and state.mtime_ns == mtime
        ):
            return ToolOutcome(FILE_UNCHANGED, False, {"type": "file_unchanged", "file": {"filePath": path}})
        allow_large = self.profile.read_allow_large and arguments.get("allow_large") is True
        if line_limit is None and not allow_large and result.size > MAX_READ_BYTES_WITHOUT_LIMIT:
            return tool_error(self.profile.read_size_error.format(size=format_file_size(result.size)))
        text, _ = decode_text(result.data, utf16_bom=self.profile.read_utf16_bom)
        lines = text.split("\n")
        if result.truncated:
            lines.pop()  # the last line may continue past the scanned bytes
        begin = 0 if start_line == 0 else start_line - 1
        if begin < 0:
            begin = max(0, len(lines) + begin)
        end = len(lines) if line_limit is None else begin + line_limit
        selected = lines[begin:end]
        cut_by_scan = result.truncated and end > len(lines)
        notice = SCAN_NOTICE if cut_by_scan else None
        if not selected and not cut_by_scan:
            content = (
                "<system-reminder>Warning: the file exists but is shorter than the provided offset "
                f"({start_line}). The file has {len(lines)} lines.</system-reminder>"
            )
        elif text == "":
            content = "<system-reminder>Warning: the file exists but the contents are empty.</system-reminder>"
        else:
            content = "\n".join(f"{start_line + index}\t{line}" for index, line in enumerate(selected))
            note = self.profile.read_invalid_utf8_note
            utf16 = self.profile.read_utf16_bom and result.data.startswith(b"\xff\xfe")
            if note and not utf16 and not is_valid_utf8(result.data, partial=result.truncated):
                content += f"\n\n{note}"
        file_content = "\n".join(selected)
        budget = READ_OUTPUT_BUDGET - len(OUTPUT_NOTICE) - len(SCAN_NOTICE) - 2
        if len(content) > budget // 4 and len(content.encode()) > budget:
            content = content.encode()[:budget].decode("utf-8", "ignore")
            file_content = file_content.encode()[:budget].decode("utf-8", "ignore")
            notice = OUTPUT_NOTICE
        if notice is not None:
            content = f"{content}\n{notice}" if content else notice
        native = {
            "type": "text",
            "file": {
                "filePath": path,
                "content": file_content,
                "numLines": len(selected),
                "startLine": start_line,
                "totalLines": len(lines),
            },
        }
        full_view = start_line <= 1 and line_limit is None and not result.truncated
        self.states[absolute] = FileState(
            text if not result.truncated else None, mtime, True, start_line, line_limit, in_context=full_view
        )
        return ToolOutcome(content, False, native, truncated=notice is not None)

    def _read_media(self, path: str, absolute: str) -> ToolOutcome:
        """A notebook, PNG or PDF the parse classified FRESH (tool_media); any other case stays out of range."""
        kind = tool_media.media_kind(absolute)
        try:
            result = read_regular_file(self.workspace, absolute, max_bytes=READ_SCAN_BUDGET, aliases=self.aliases)
        except ConfinementError:
            return self._escaped("Read", path, absolute)
        except OSError as exc:
            raise ReplayError(
                ErrorKind.EXECUTOR,
                f"Claude Code Read of {path!r}: {exc.strerror or exc}; the recorded read succeeded and forkpoint "
                "does not reproduce this case",
                before_effect=True,
            ) from None
        if result.truncated:
            raise ReplayError(ErrorKind.EXECUTOR, f"Claude Code Read of {path!r}: larger than {READ_SCAN_BUDGET} "
                                                  "bytes", before_effect=True)
        if kind == "notebook":
            outcome = tool_media.read_notebook(path, result.data)
            # The session knows the notebook now (a later Write needs that); no "unchanged" stub was measured.
            text, _ = decode_text(result.data)
            self.states[absolute] = FileState(text, self._mtime(absolute), False)
            return outcome
        if kind == "pdf":
            return tool_media.read_pdf(path, absolute, result.data)
        if os.path.splitext(absolute)[1].lower() != ".png":
            raise ReplayError(ErrorKind.EXECUTOR, f"Claude Code Read of {path!r}: only PNG images are reproduced",
                              before_effect=True)
        return tool_media.read_image(path, result.data)

    # ------------------------------------------------------------------ Write

    def write(self, arguments: dict[str, Any]) -> ToolOutcome:
        path = self._path_arg("Write", arguments)
        content = arguments.get("content")
        if not isinstance(content, str):
            raise ReplayError(ErrorKind.EXECUTOR, "Write call has no string content", before_effect=True)
        absolute = self.resolve("Write", path)
        current = self._load("Write", path, absolute)
        if isinstance(current, ToolOutcome):
            return current
        state = self.states.get(absolute)
        if current.kind == "directory":
            if self.profile.write_directory_message:
                return tool_use_error(
                    f"{absolute} is a directory, not a file. To create a file inside it, include the file name in "
                    "file_path."
                )
            if self.profile.write_requires_read and state is None:
                return tool_use_error(NOT_READ_YET)
            return tool_error(f"EISDIR: illegal operation on a directory, open '{absolute}'")
        if current.kind == "file":
            if self.profile.write_requires_read and state is None:
                return tool_use_error(NOT_READ_YET)
            if state is not None and self._stale(state, current):
                return tool_use_error(MODIFIED_SINCE_READ)
        mtime = self._write("Write", path, absolute, to_utf8(content))
        if isinstance(mtime, ToolOutcome):
            return mtime
        self.states[absolute] = FileState(content.replace("\r\n", "\n"), mtime, False)
        if current.kind == "missing":
            native: dict[str, Any] = {
                "type": "create",
                "filePath": path,
                "content": content,
                "structuredPatch": [],
                "originalFile": None,
                "userModified": False,
            }
            return ToolOutcome(f"File created successfully at: {path}{CONTEXT_NOTE}", False, native)
        native = {
            "type": "update",
            "filePath": path,
            "content": content,
            "structuredPatch": structured_patch(current.text, content),
            "originalFile": current.text,
            "userModified": False,
        }
        return ToolOutcome(f"The file {path} has been updated successfully.{CONTEXT_NOTE}", False, native)

    # ------------------------------------------------------------------ Edit

    def edit(self, arguments: dict[str, Any]) -> ToolOutcome:
        path = self._path_arg("Edit", arguments)
        old = arguments.get("old_string")
        new = arguments.get("new_string")
        if not isinstance(old, str) or not isinstance(new, str):
            raise ReplayError(ErrorKind.EXECUTOR, "Edit call needs string old_string/new_string", before_effect=True)
        replace_all = arguments.get("replace_all") is True
        absolute = self.resolve("Edit", path)
        if old == new:
            return tool_use_error("No changes to make: old_string and new_string are exactly the same.")
        current = self._load("Edit", path, absolute)
        if isinstance(current, ToolOutcome):
            return current
        if current.kind == "directory":
            return tool_error(f"EISDIR: illegal operation on a directory, read '{absolute}'")
        if current.kind == "missing" and old != "":
            return tool_use_error(self._missing(absolute))
        if os.path.splitext(absolute)[1].lower() == ".ipynb":
            return tool_use_error("File is a Jupyter Notebook. Use the NotebookEdit to edit this file.")
        if os.path.splitext(absolute)[1].lower() not in MARKDOWN_EXTENSIONS:
            new = "\n".join(js_trim_end(line) for line in new.split("\n"))
        state = self.states.get(absolute)
        stale = state is not None and current.kind == "file" and self._stale(state, current)
        original = current.text
        if old == "":
            if js_trim(original) != "":
                return tool_use_error("Cannot create new file - file already exists.")
            actual = ""
            updated = new
        else:
            found = _find_actual(original, old)
            if found is None:
                if stale and state is not None and state.in_context:
                    return tool_use_error(MODIFIED_SINCE_READ)
                return tool_use_error(f"String to replace not found in file.\nString: {old}")
            actual = found
            matches = original.count(actual)
            if matches > 1 and not replace_all:
                return tool_use_error(
                    f"Found {matches} matches of the string to replace, but replace_all is false. To replace all "
                    "occurrences, set replace_all to true. To replace only one occurrence, please provide more "
                    f"context to uniquely identify the instance.\nString: {old}"
                )
            updated = _apply_edit(original, actual, new, replace_all)
        data = updated.replace("\n", "\r\n") if current.crlf else updated
        mtime = self._write("Edit", path, absolute, (b"\xef\xbb\xbf" if current.bom else b"") + to_utf8(data))
        if isinstance(mtime, ToolOutcome):
            return mtime
        # Whether the model now knows the whole file (measured on 2.1.332, which reports it; 2.1.220 tracks the
        # same state for its stale checks but always prints the context note): a new file or a file it had seen
        # yes; a file it never saw no; a file it had seen that changed on disk: the edit applies with a note.
        recovered = stale and state is not None and state.in_context
        if current.kind == "missing":
            in_context = True
        else:
            in_context = state is not None and (state.in_context or stale) and not recovered
        tracks = self.profile.edit_tracks_context
        base = "has been updated. All occurrences were successfully replaced." if replace_all else (
            "has been updated successfully."
        )
        suffix = STALE_NOTE if recovered else CONTEXT_NOTE if in_context or not tracks else ""
        native: dict[str, Any] = {
            "filePath": path,
            "oldString": actual if old else old,
            "newString": new,
            "originalFile": original,
            "structuredPatch": structured_patch(original, updated),
            "userModified": False,
            "replaceAll": replace_all,
        }
        if recovered:
            native["staleRecovered"] = True
        if tracks and not in_context:
            native["contentNotInModelContext"] = True
        self.states[absolute] = FileState(updated, mtime, False, in_context=in_context)
        return ToolOutcome(f"The file {path} {base}{suffix}", False, native)


def _find_actual(text: str, search: str) -> str | None:
    """``search`` as it appears in ``text``: literally, or with curly quotes in the file straightened."""
    if search in text:
        return search
    index = text.translate(_QUOTES).find(search.translate(_QUOTES))
    return text[index : index + len(search)] if index >= 0 else None


def _apply_edit(text: str, old: str, new: str, replace_all: bool) -> str:
    """Claude's applyEditToFile: deleting a string also deletes the newline right after it."""
    if new == "" and not old.endswith("\n") and old + "\n" in text:
        old += "\n"
    return text.replace(old, new) if replace_all else text.replace(old, new, 1)

