"""Claude Code's Write and Edit tools, re-executed inside the workspace with their own output text.

Every rule here was measured on the real 2.1.220 / 2.1.332 binaries (scripted model):

- The session remembers what the model saw of each file (``tool_files.FileState``). A file changed on disk since
  (other mtime and, for a full view, other content) refuses Write and an Edit whose ``old_string`` is gone
  (``File has been modified since read ...``); an Edit that still applies adds a note instead.
- 2.1.220 refuses Write over an existing file the session has not seen. Edit never needs a Read.
- Edit: ``old_string`` matched literally or with curly quotes straightened; trailing whitespace stripped from
  ``new_string`` lines except in Markdown; ``new_string`` "" also eats the following newline; CRLF files stay
  CRLF (and a BOM stays). Write writes the content as is and creates parent directories.
- 2.0.x (``ToolProfile.cat_n_arrows``): no context notes; a Write over a file and an Edit answer with a numbered
  ``cat -n`` snippet (the whole written file up to 16000 lines; the edit +-4 lines), ``replace_all`` quotes both
  strings; ``toolUseResult`` has no ``originalFile``/``userModified`` for Write.
- forkpoint's budget: a file over 16 MiB is not edited (refused before any effect).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from forkpoint.adapters.claude_code.jstext import js_trim, js_trim_end
from forkpoint.adapters.claude_code.tool_codecs import decode_text, structured_patch, to_utf8, uses_crlf
from forkpoint.adapters.claude_code.tool_files import FileState, SessionFiles, node_error
from forkpoint.adapters.claude_code.tool_profile import ToolOutcome, cat_n, tool_error, tool_use_error
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import ConfinementError, NotRegularFileError, read_regular_file, write_file_confined

EDIT_BUDGET = 16 * 1024 * 1024
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
MARKDOWN_EXTENSIONS = frozenset({".md", ".mdx"})
SNIPPET_HEAD = "Here's the result of running `cat -n` on a snippet of the edited file:\n"
#: 2.0.x cuts a Write's snippet after this many lines and appends CLIPPED
WRITE_SNIPPET_LINES = 16000
CLIPPED = (
    "<response clipped><NOTE>To save on context only part of this file has been shown to you. You should retry this "
    "tool after you have searched inside the file with Grep in order to find the line numbers of what you are "
    "looking for.</NOTE>"
)
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


@dataclass
class _Loaded:
    """The file a Write or Edit finds on disk (decoded like Claude: BOM and CRLF remembered)."""

    kind: str  # "file" | "missing" | "directory"
    raw: bytes = b""
    text: str = ""
    bom: bool = False
    crlf: bool = False
    mtime_ns: int | None = None


def _load(files: SessionFiles, tool: str, path: str, absolute: str) -> _Loaded | ToolOutcome:
    """The current file for Write/Edit, or the tool error Claude would give."""
    try:
        result = read_regular_file(files.workspace, absolute, max_bytes=EDIT_BUDGET, aliases=files.aliases)
    except ConfinementError:
        outcome = files.escaped(tool, path, absolute)
        return _Loaded("directory") if outcome.content.startswith("EISDIR") else outcome
    except (FileNotFoundError, NotADirectoryError):
        return _Loaded("missing")
    except NotRegularFileError:
        if os.path.isdir(files.host(absolute)):
            return _Loaded("directory")
        return files.not_regular(tool, absolute)
    except OSError as exc:
        return tool_error(node_error(exc, absolute))
    if result.truncated:
        raise ReplayError(
            ErrorKind.EXECUTOR,
            f"Claude Code {tool} of {path!r}: the file is larger than forkpoint's {EDIT_BUDGET}-byte edit budget",
            before_effect=True,
        )
    text, bom = decode_text(result.data)
    return _Loaded("file", result.data, text, bom, uses_crlf(result.data), files.mtime(absolute))


def _stale(state: FileState, current: _Loaded) -> bool:
    """Changed on disk since the session last saw it (an mtime change alone does not count for full views)."""
    if current.mtime_ns == state.mtime_ns:
        return False
    return not (state.in_context and state.text is not None and state.text == current.text)


def _write(files: SessionFiles, tool: str, path: str, absolute: str, data: bytes) -> int | ToolOutcome | None:
    """Write (creating parents); the new mtime, or the tool error when the file system refuses."""
    try:
        write_file_confined(files.workspace, absolute, data, create_parents=True, aliases=files.aliases)
    except ConfinementError as exc:
        raise ReplayError(
            ErrorKind.EXECUTOR, f"Claude Code {tool} of {path!r} resolves outside the workspace: {exc}"
        ) from exc
    except OSError as exc:  # e.g. a parent that is a regular file
        return tool_error(node_error(exc, absolute))
    return files.mtime(absolute)


def write(files: SessionFiles, arguments: dict[str, Any]) -> ToolOutcome:
    """Claude's Write: ``content`` as is to ``file_path`` (parents created), after the session's checks."""
    path = files.path_arg("Write", arguments)
    content = arguments.get("content")
    if not isinstance(content, str):
        raise ReplayError(ErrorKind.EXECUTOR, "Write call has no string content", before_effect=True)
    absolute = files.resolve("Write", path)
    current = _load(files, "Write", path, absolute)
    if isinstance(current, ToolOutcome):
        return current
    state = files.states.get(absolute)
    if current.kind == "directory":
        if files.profile.write_directory_message:
            return tool_use_error(
                f"{absolute} is a directory, not a file. To create a file inside it, include the file name in "
                "file_path."
            )
        if files.profile.write_requires_read and state is None:
            return tool_use_error(NOT_READ_YET)
        return tool_error(f"EISDIR: illegal operation on a directory, open '{absolute}'")
    if current.kind == "file":
        if files.profile.write_requires_read and state is None:
            return tool_use_error(NOT_READ_YET)
        if state is not None and _stale(state, current):
            return tool_use_error(MODIFIED_SINCE_READ)
    mtime = _write(files, "Write", path, absolute, to_utf8(content))
    if isinstance(mtime, ToolOutcome):
        return mtime
    files.states[absolute] = FileState(content.replace("\r\n", "\n"), mtime, False)
    if files.profile.cat_n_arrows:
        return _write_v2_0(path, content, current)
    if current.kind == "missing":
        native: dict[str, Any] = {
            "type": "create",
            "filePath": path,
            "content": content,
            "structuredPatch": [],
            "originalFile": None,
            "userModified": False,
        }
        return ToolOutcome(f"File created successfully at: {path}{_context_note(files)}", False,
                           _write_native(files, native))
    native = {
        "type": "update",
        "filePath": path,
        "content": content,
        "structuredPatch": structured_patch(current.text, content),
        "originalFile": current.text,
        "userModified": False,
    }
    return ToolOutcome(f"The file {path} has been updated successfully.{_context_note(files)}", False,
                       _write_native(files, native))


def _context_note(files: SessionFiles) -> str:
    """The note 2.1.220 appends to a Write/Edit result; the 2.1.94-2.1.126 profile has none."""
    return CONTEXT_NOTE if files.profile.context_note else ""


def _write_native(files: SessionFiles, native: dict[str, Any]) -> dict[str, Any]:
    """Write's ``toolUseResult``: 2.1.94-2.1.126 write no ``userModified`` (``ToolProfile.write_user_modified``)."""
    return native if files.profile.write_user_modified else {k: v for k, v in native.items() if k != "userModified"}


def _write_v2_0(path: str, content: str, current: _Loaded) -> ToolOutcome:
    """2.0.x's Write result: a new file is named, an overwritten one shown numbered (its ``Write`` mapping)."""
    if current.kind == "missing":
        native: dict[str, Any] = {"type": "create", "filePath": path, "content": content, "structuredPatch": []}
        return ToolOutcome(f"File created successfully at: {path}", False, native)
    native = {"type": "update", "filePath": path, "content": content,
              "structuredPatch": structured_patch(current.text, content)}
    lines = content.replace("\r\n", "\n").split("\n")
    shown = "\n".join(lines[:WRITE_SNIPPET_LINES]) + CLIPPED if len(lines) > WRITE_SNIPPET_LINES else content
    return ToolOutcome(f"The file {path} has been updated. {SNIPPET_HEAD}{cat_n(shown, 1)}", False, native)


def _edit_text_v2_0(path: str, original: str, actual: str, new: str, replace_all: bool) -> str:
    """2.0.x's Edit result: the edited region +-4 lines, numbered (its ``c9Q`` snippet)."""
    if replace_all:
        return (f"The file {path} has been updated. All occurrences of '{actual}' were successfully replaced with "
                f"'{new}'.")
    before = original.split(actual, 1)[0] if actual else original[:1]
    first = before.count("\n")
    edited = new + original if actual == "" else _apply_edit(original, actual, new, False)
    start = max(0, first - 4)
    end = first + 4 + len(new.split("\n"))
    snippet = "\n".join(edited.split("\n")[start:end])
    return f"The file {path} has been updated. {SNIPPET_HEAD}{cat_n(snippet, start + 1)}"


def edit(files: SessionFiles, arguments: dict[str, Any]) -> ToolOutcome:
    """Claude's Edit: ``old_string`` -> ``new_string`` in ``file_path`` (once, or every match with ``replace_all``)."""
    path = files.path_arg("Edit", arguments)
    old = arguments.get("old_string")
    new = arguments.get("new_string")
    if not isinstance(old, str) or not isinstance(new, str):
        raise ReplayError(ErrorKind.EXECUTOR, "Edit call needs string old_string/new_string", before_effect=True)
    replace_all = arguments.get("replace_all") is True
    absolute = files.resolve("Edit", path)
    if old == new:
        return tool_use_error("No changes to make: old_string and new_string are exactly the same.")
    current = _load(files, "Edit", path, absolute)
    if isinstance(current, ToolOutcome):
        return current
    if current.kind == "directory":
        return tool_error(f"EISDIR: illegal operation on a directory, read '{absolute}'")
    if current.kind == "missing" and old != "":
        return tool_use_error(files.missing(absolute))
    if os.path.splitext(absolute)[1].lower() == ".ipynb":
        return tool_use_error("File is a Jupyter Notebook. Use the NotebookEdit to edit this file.")
    if os.path.splitext(absolute)[1].lower() not in MARKDOWN_EXTENSIONS:
        new = "\n".join(js_trim_end(line) for line in new.split("\n"))
    state = files.states.get(absolute)
    stale = state is not None and current.kind == "file" and _stale(state, current)
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
    mtime = _write(files, "Edit", path, absolute, (b"\xef\xbb\xbf" if current.bom else b"") + to_utf8(data))
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
    tracks = files.profile.edit_tracks_context
    base = "has been updated. All occurrences were successfully replaced." if replace_all else (
        "has been updated successfully."
    )
    suffix = STALE_NOTE if recovered else _context_note(files) if in_context or not tracks else ""
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
    files.states[absolute] = FileState(updated, mtime, False, in_context=in_context)
    if files.profile.cat_n_arrows:
        native.pop("staleRecovered", None)
        return ToolOutcome(_edit_text_v2_0(path, original, actual if old else old, new, replace_all), False, native)
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
