"""Claude Code's NotebookEdit, re-executed inside the workspace with its own output text and notebook bytes.

Measured on the real binaries (``tests/fixtures/claude_code/<version>/notebook_edit``, with ``workspace-final/``)
and read from their tool code:

- The notebook must have been read in the session (``File has not been read yet...``) and not changed on disk
  since (``File has been modified since read...``); it is parsed with ``JSON.parse`` and written back with
  ``JSON.stringify(nb, null, 1)`` in its own line endings (CRLF stays CRLF). 2.1.332 keeps a final newline and a
  BOM; 2.1.220 writes neither.
- The cell is found by ``id``, else by a ``cell-<N>`` index; insert goes after it (at the top without
  ``cell_id``). An inserted cell gets a random 8-hex id on nbformat >= 4.5: forkpoint reuses the id the recording
  shows (``Inserted cell <id> with``), so later calls that name it find it; without one it draws a fresh id.
- replace: the source is set (a string), ``cell_type`` changed when given; a code cell loses its outputs
  (``execution_count`` null, ``outputs`` []). 2.1.332 resets by the NEW type (markdown/raw drop those keys),
  2.1.220 by the OLD type. delete removes the cell.
- Results: ``Updated cell <id> with <src>``, ``Inserted cell <id> with <src>`` (2.1.332: ``Inserted a new cell
  with`` when there is no id; 2.1.220 prints ``undefined``), ``Deleted cell <id>``; ``toolUseResult`` holds the
  cell, the language and the whole file before and after.
- forkpoint's budget: a notebook over 16 MiB is refused before any effect; a FIFO, device or socket is a tool
  error, a symlink out of the workspace a refusal (as for Edit).
"""

from __future__ import annotations

import os
import re
import secrets
from typing import Any

from forkpoint.adapters.claude_code.jstext import JsJsonError, js_json_parse, js_json_stringify, js_len
from forkpoint.adapters.claude_code.tool_codecs import decode_text, to_utf8, uses_crlf
from forkpoint.adapters.claude_code.tool_edit import EDIT_BUDGET, MODIFIED_SINCE_READ, NOT_READ_YET
from forkpoint.adapters.claude_code.tool_files import FileState, SessionFiles, node_error
from forkpoint.adapters.claude_code.tool_profile import ToolOutcome, tool_error, tool_use_error
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import ConfinementError, NotRegularFileError, read_regular_file, write_file_confined

NOT_A_NOTEBOOK = (
    'Notebook file is not a valid Jupyter notebook (top-level "cells" must be an array of cell objects, each with a '
    'string or string-array "source").'
)
_RECORDED_INSERT = re.compile(r"Inserted cell ([0-9a-f]{8}) with ")
_CELL_INDEX = re.compile(r"cell-(\d+)")
#: Claude's result for a stored ``toolUseResult`` whose two file texts exceed this many characters (2.1.332).
_STORAGE_LIMIT = 50_000


def recorded_insert_id(historical_text: str | None) -> str | None:
    """The random id the recorded insert drew (``Inserted cell <8 hex> with ...``), if the recording shows one."""
    match = _RECORDED_INSERT.match(historical_text or "")
    return match.group(1) if match else None


def _is_notebook(value: Any) -> bool:
    cells = value.get("cells") if isinstance(value, dict) else None
    return isinstance(cells, list) and all(
        isinstance(cell, dict)
        and (isinstance(cell.get("source"), str)
             or (isinstance(cell.get("source"), list) and all(isinstance(part, str) for part in cell["source"])))
        for cell in cells
    )


def _find(cells: list[Any], cell_id: str | None, mode: str) -> int | str:
    """Claude's cell lookup: the index to edit (insert: to insert at), or the error message."""
    insert = mode == "insert"
    if not cell_id:
        return 0 if insert else "Cell ID must be specified when not inserting a new cell."
    index = next((i for i, cell in enumerate(cells) if isinstance(cell, dict) and cell.get("id") == cell_id), -1)
    if index == -1:
        match = _CELL_INDEX.fullmatch(cell_id)
        if match is None:
            return f'Cell with ID "{cell_id}" not found in notebook.'
        index = int(match.group(1))
        if index >= len(cells):
            return f"Cell with index {index} does not exist in notebook."
    return index + 1 if insert else index


def _source_text(cell: dict[str, Any]) -> str:
    source = cell.get("source")
    return "".join(source) if isinstance(source, list) else str(source)


def notebook_edit(files: SessionFiles, arguments: dict[str, Any], historical_text: str | None,
                  modern: bool) -> ToolOutcome:
    """Claude's NotebookEdit (``modern``: the 2.1.332 rules, else 2.1.220's)."""
    path = files.path_arg("NotebookEdit", arguments, "notebook_path")
    source = arguments.get("new_source")
    cell_id = arguments.get("cell_id")
    cell_type = arguments.get("cell_type")
    mode = arguments.get("edit_mode", "replace")
    if (not isinstance(source, str) or (cell_id is not None and not isinstance(cell_id, str))
            or cell_type not in (None, "code", "markdown") or mode not in ("replace", "insert", "delete")):
        raise ReplayError(ErrorKind.EXECUTOR, "NotebookEdit call input is not the tool's schema; Claude Code would "
                                              "reject it", before_effect=True)
    absolute = files.resolve("NotebookEdit", path)
    if os.path.splitext(absolute)[1] != ".ipynb":
        return tool_use_error("File must be a Jupyter notebook (.ipynb file). For editing other file types, use the "
                              "FileEdit tool.")
    if mode == "insert" and not cell_type:
        return tool_use_error("Cell type is required when using edit_mode=insert.")
    state = files.states.get(absolute)
    if state is None:
        return tool_use_error(NOT_READ_YET)
    try:
        result = read_regular_file(files.workspace, absolute, max_bytes=EDIT_BUDGET, aliases=files.aliases)
    except ConfinementError:
        return files.escaped("NotebookEdit", path, absolute)
    except (FileNotFoundError, NotADirectoryError):
        return tool_use_error("Notebook file does not exist.")
    except NotRegularFileError:
        return files.not_regular("NotebookEdit", absolute)
    except OSError as exc:
        return tool_error(node_error(exc, absolute))
    if result.truncated:
        raise ReplayError(ErrorKind.EXECUTOR, f"Claude Code NotebookEdit of {path!r}: the notebook is larger than "
                                              f"forkpoint's {EDIT_BUDGET}-byte edit budget", before_effect=True)
    mtime = files.mtime(absolute)
    if mtime is not None and state.mtime_ns is not None and mtime > state.mtime_ns:
        return tool_use_error(MODIFIED_SINCE_READ)
    text, bom = decode_text(result.data)
    try:
        notebook = js_json_parse(text)
    except JsJsonError:
        return tool_use_error("Notebook is not valid JSON.")
    if not _is_notebook(notebook):
        if modern:
            return tool_use_error(NOT_A_NOTEBOOK)
        raise ReplayError(ErrorKind.EXECUTOR, f"Claude Code 2.1.220 NotebookEdit of {path!r}: not a notebook; "
                                              "forkpoint does not reproduce that version's failure text",
                          before_effect=True)
    cells: list[Any] = notebook["cells"]
    found = _find(cells, cell_id, mode)
    if isinstance(found, str):
        return tool_use_error(found)
    metadata = notebook.get("metadata")
    info = metadata.get("language_info") if isinstance(metadata, dict) else None
    language = info.get("name") if isinstance(info, dict) and info.get("name") is not None else "python"
    if not modern and not isinstance(metadata, dict):
        raise ReplayError(ErrorKind.EXECUTOR, f"Claude Code 2.1.220 NotebookEdit of {path!r}: notebook without "
                                              "metadata; its failure text is not reproduced", before_effect=True)
    nbformat, minor = notebook.get("nbformat"), notebook.get("nbformat_minor")
    with_ids = isinstance(nbformat, (int, float)) and not isinstance(nbformat, bool) and (
        nbformat > 4 or (nbformat == 4 and isinstance(minor, (int, float)) and minor >= 5))
    index = found
    if not modern and mode == "replace" and index == len(cells):
        mode, cell_type = "insert", cell_type or "code"
    new_id: str | None = cell_id
    if mode == "insert":
        new_id = (recorded_insert_id(historical_text) or secrets.token_hex(4)) if with_ids else None
    elif not modern and not with_ids:
        new_id = None
    old_source: str | None = None
    if mode == "delete":
        old_source = _source_text(cells[index])
        del cells[index]
    elif mode == "insert":
        if cell_type == "markdown":
            cell: dict[str, Any] = {"cell_type": "markdown", "id": new_id, "source": source, "metadata": {}}
        else:
            cell = {"cell_type": "code", "id": new_id, "source": source, "metadata": {}, "execution_count": None,
                    "outputs": []}
        if new_id is None:
            del cell["id"]
        cells.insert(index, cell)
    else:
        cell = cells[index]
        old_source = _source_text(cell)
        if modern:
            if cell_type == "code" and cell.get("cell_type") != "code" and cell.get("attachments"):
                raise ReplayError(ErrorKind.EXECUTOR, f"NotebookEdit of {path!r}: a cell with attachments turned "
                                                      "into code; forkpoint does not reproduce that refusal",
                                  before_effect=True)
            cell["source"] = source
            if cell_type:
                cell["cell_type"] = cell_type
            if cell.get("cell_type") == "code":
                cell["execution_count"] = None
                cell["outputs"] = []
                if not cell.get("attachments"):
                    cell.pop("attachments", None)
            elif cell.get("cell_type") in ("markdown", "raw"):
                cell.pop("execution_count", None)
                cell.pop("outputs", None)
        else:
            cell["source"] = source
            if cell.get("cell_type") == "code":
                cell["execution_count"] = None
                cell["outputs"] = []
            if cell_type and cell_type != cell.get("cell_type"):
                cell["cell_type"] = cell_type
    try:
        body = js_json_stringify(notebook, 1)
    except JsJsonError as exc:
        raise ReplayError(ErrorKind.EXECUTOR, f"NotebookEdit of {path!r}: {exc}", before_effect=True) from exc
    updated = ("\ufeff" if bom else "") + body + ("\n" if text.endswith("\n") else "") if modern else body
    crlf = uses_crlf(result.data)
    data = to_utf8(updated.replace("\n", "\r\n") if crlf else updated)
    try:
        write_file_confined(files.workspace, absolute, data, aliases=files.aliases)
    except ConfinementError as exc:
        raise ReplayError(ErrorKind.EXECUTOR, f"Claude Code NotebookEdit of {path!r} resolves outside the "
                                              f"workspace: {exc}") from exc
    except OSError as exc:
        return tool_error(node_error(exc, absolute))
    files.states[absolute] = FileState(updated.removeprefix("\ufeff"), files.mtime(absolute), False)
    native: dict[str, Any] = {"new_source": source}
    if old_source is not None:
        native["old_source"] = old_source
    native.update({"cell_type": cell_type or "code", "language": language, "edit_mode": mode})
    if new_id:
        native["cell_id"] = new_id
    original = ("\ufeff" if bom and modern else "") + text
    native.update({"error": "", "notebook_path": absolute, "original_file": original, "updated_file": updated})
    if modern and js_len(original) + js_len(updated) > _STORAGE_LIMIT:
        native["original_file"] = native["updated_file"] = ""
    shown = new_id if new_id else "undefined"
    if mode == "replace":
        content = f"Updated cell {shown} with {source}"
    elif mode == "insert":
        content = f"Inserted {f'cell {new_id}' if new_id else 'a new cell'} with {source}" if modern else (
            f"Inserted cell {shown} with {source}")
    else:
        content = f"Deleted cell {shown}"
    return ToolOutcome(content, False, native)
