"""Claude Code's Read tool, re-executed inside the workspace with its own output text.

Every rule here was measured on the real 2.1.220 / 2.1.332 binaries (scripted model):

- ``N\\t<line>`` per line, lines split on ``\\n`` after CRLF -> LF and a UTF-8 BOM dropped, so a file ending in a
  newline shows an empty last line; numbering starts at ``offset`` (``offset: 0`` numbers from 0 but reads from
  line 1); ``limit`` 0 means no limit; no 2,000-line or per-line cut.
- No ``limit`` and more than 256 KiB on disk: a size error (2.1.332 also accepts ``allow_large: true``).
- An empty file / an offset past the end give ``<system-reminder>`` warnings (not errors); a missing file
  Claude's "File does not exist" text (``SessionFiles.missing_outcome``; a missing PNG too, and a
  path outside the workspace that the sandbox does not have: ``SessionFiles.absent_outside``); a directory
  ``EISDIR: illegal operation on a directory, read '<path>'``.
- 2.0.x numbers lines ``cat -n``-style (``     1→<line>``, ``tool_profile.cat_n``) and appends its malware
  ``<system-reminder>`` to every Read that shows lines; lines that join to nothing (an empty file too) get the
  offset warning.
- 2.1.220 answers a repeated Read of an unchanged file with the same range with a "file unchanged" stub.
- Binary extensions are refused; notebooks, PNGs and PDFs become content blocks (``tool_media``).
- forkpoint's own budgets apply only beyond that: at most 16 MiB (+1 probe byte) are scanned and 4 MiB
  returned; a cut appends one ``[Read truncated by forkpoint replay: ...]`` line and sets ``truncated``.
"""

from __future__ import annotations

import os
from typing import Any

from forkpoint.adapters.claude_code import tool_media
from forkpoint.adapters.claude_code.jstext import format_file_size
from forkpoint.adapters.claude_code.tool_codecs import decode_text, is_valid_utf8
from forkpoint.adapters.claude_code.tool_files import FileState, SessionFiles, node_error
from forkpoint.adapters.claude_code.tool_profile import ToolOutcome, cat_n, tool_error, tool_use_error
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import ConfinementError, NotRegularFileError, read_regular_file

READ_SCAN_BUDGET = 16 * 1024 * 1024
READ_OUTPUT_BUDGET = 4 * 1024 * 1024
MAX_READ_BYTES_WITHOUT_LIMIT = 256 * 1024
SCAN_NOTICE = (
    f"[Read truncated by forkpoint replay: only the first {READ_SCAN_BUDGET} bytes of the file were scanned; "
    "the requested lines continue past them]"
)
OUTPUT_NOTICE = f"[Read truncated by forkpoint replay: the output exceeds {READ_OUTPUT_BUDGET} bytes]"
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


def read(files: SessionFiles, arguments: dict[str, Any]) -> ToolOutcome:
    """Claude's Read of ``file_path`` (``offset``/``limit`` lines; 2.1.332 also ``allow_large``)."""
    path = files.path_arg("Read", arguments)
    outside = files.outside(path)
    if outside is not None:
        return files.absent_outside("Read", path, outside)
    absolute = files.resolve("Read", path)
    extension = os.path.splitext(absolute)[1].lower()
    if extension in SPECIAL_READ_EXTENSIONS:
        return _read_media(files, path, absolute)
    if extension in BINARY_EXTENSIONS:
        return tool_use_error(files.profile.binary_file_error.format(ext=extension))
    offset = _int_arg(arguments.get("offset"))
    limit = _int_arg(arguments.get("limit"))
    start_line = 1 if offset is None else offset
    line_limit = limit if limit is not None and limit > 0 else None
    try:
        result = read_regular_file(files.workspace, absolute, max_bytes=READ_SCAN_BUDGET, aliases=files.aliases)
    except ConfinementError:
        return files.escaped("Read", path, absolute)
    except (FileNotFoundError, NotADirectoryError):
        return files.missing_outcome(absolute)
    except NotRegularFileError:
        if os.path.isdir(files.host(absolute)):
            return tool_error(f"EISDIR: illegal operation on a directory, read '{absolute}'")
        return files.not_regular("Read", absolute)
    except OSError as exc:
        return tool_error(node_error(exc, absolute))
    mtime = files.mtime(absolute)
    state = files.states.get(absolute)
    if (
        files.profile.read_dedup
        and state is not None
        and state.from_read
        and state.offset == start_line
        and state.limit == line_limit
        and state.mtime_ns == mtime
    ):
        return ToolOutcome(FILE_UNCHANGED, False, {"type": "file_unchanged", "file": {"filePath": path}})
    allow_large = files.profile.read_allow_large and arguments.get("allow_large") is True
    if line_limit is None and not allow_large and result.size > MAX_READ_BYTES_WITHOUT_LIMIT:
        return tool_error(files.profile.read_size_error.format(size=format_file_size(result.size)))
    text, _ = decode_text(result.data, utf16_bom=files.profile.read_utf16_bom)
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
    arrows = files.profile.cat_n_arrows
    if (not selected or (arrows and not "\n".join(selected))) and not cut_by_scan:
        content = (
            "<system-reminder>Warning: the file exists but is shorter than the provided offset "
            f"({start_line}). The file has {len(lines)} lines.</system-reminder>"
        )
    elif text == "":
        content = "<system-reminder>Warning: the file exists but the contents are empty.</system-reminder>"
    elif arrows:
        content = cat_n("\n".join(selected), start_line) + files.profile.read_reminder
    else:
        content = "\n".join(f"{start_line + index}\t{line}" for index, line in enumerate(selected))
        note = files.profile.read_invalid_utf8_note
        utf16 = files.profile.read_utf16_bom and result.data.startswith(b"\xff\xfe")
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
    files.states[absolute] = FileState(
        text if not result.truncated else None, mtime, True, start_line, line_limit, in_context=full_view
    )
    return ToolOutcome(content, False, native, truncated=notice is not None)


def _read_media(files: SessionFiles, path: str, absolute: str) -> ToolOutcome:
    """A notebook, PNG or PDF the parse classified FRESH (tool_media); any other case stays out of range."""
    kind = tool_media.media_kind(absolute)
    try:
        result = read_regular_file(files.workspace, absolute, max_bytes=READ_SCAN_BUDGET, aliases=files.aliases)
    except ConfinementError:
        return files.escaped("Read", path, absolute)
    except (FileNotFoundError, NotADirectoryError) as exc:
        if kind == "image":  # measured (fixture read_outside): a missing PNG gets Read's missing-file text
            return files.missing_outcome(absolute)
        raise ReplayError(ErrorKind.EXECUTOR, f"Claude Code Read of {path!r}: {exc.strerror or exc}; forkpoint "
                          f"does not reproduce a missing {kind} (unmeasured)", before_effect=True) from None
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
        files.states[absolute] = FileState(text, files.mtime(absolute), False)
        return outcome
    if kind == "pdf":
        return tool_media.read_pdf(path, absolute, result.data)
    if os.path.splitext(absolute)[1].lower() != ".png":
        raise ReplayError(ErrorKind.EXECUTOR, f"Claude Code Read of {path!r}: only PNG images are reproduced",
                          before_effect=True)
    return tool_media.read_image(path, result.data)


def _int_arg(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None
