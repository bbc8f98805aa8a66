"""Claude Code's Read of notebooks, images and PDFs: what forkpoint reproduces, and what stays stale (and why).

Measured on the real 2.1.220 / 2.1.332 binaries (fixture ``read_media``) and read from 2.1.332's bundled source:

- ``.ipynb``: one text block per cell ``<cell id="ID">[<cell_type>T</cell_type>|<language>L</language>]SOURCE
  </cell id="ID">``, then per code-cell output a block ``"\\n" + text`` (stream text; ``text/plain`` of a
  result; ``ename: evalue`` + traceback lines of an error; an unknown type adds ``Outputs of an unknown type are
  not shown.``), adjacent text blocks joined with ``"\\n"``. Same text in both versions. Image outputs and
  outputs over 10,000 characters per cell (Claude replaces them by a jq hint) are not reproduced.
- PNG: passed through unchanged (base64 of the file) when it is within every limit of both versions; otherwise
  Claude resizes / re-encodes it with its native image library (sharp), which forkpoint cannot match byte for
  byte. JPEG, GIF, WebP, BMP, ICO, TIFF were not measured.
- PDF (2.1.332): ``PDF file read: <path> (<size>)`` + a ``document`` block holding the file's base64. 2.1.220
  puts the document in a separate meta message after the result, which the rebuilt session does not carry, and
  ``pages`` renders page images with poppler: both stay stale.

The stale-or-fresh decision is made from the HISTORICAL observation when the session is parsed (so ``inspect``,
``prepare`` and replay agree and nothing is allocated for a call that cannot run). At run time a FRESH call whose
file has left the reproducible range (it changed since the recording) is an executor error before any effect.
"""

from __future__ import annotations

import base64
import binascii
import math
import os
import re
import struct
from typing import Any

import orjson

from forkpoint.adapters.claude_code.jstext import format_file_size
from forkpoint.adapters.claude_code.tool_profile import ToolOutcome
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import Observation

IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".ico", ".tiff", ".tif"})
NOTEBOOK_OUTPUTS_MAX = 10_000  # 2.1.332: a cell's outputs over this many characters become a jq hint
#: Pass-through limits that hold for every model of both versions (2.1.332: 1568 px and 1568 28-px tiles for
#: some models, 300 KiB raw for some transports; 2.1.220: 2000 px, 3.75 MB raw).
IMAGE_MAX_SIDE = 1568
IMAGE_MAX_TILES = 1568
IMAGE_MAX_BYTES = 307_200
PDF_MAX_BYTES = 1_000_000  # well under 2.1.332's 2.5 MB whole-PDF limit
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_PDF_TEXT = re.compile(r"PDF file read: .* \([^()]*\)\Z", re.DOTALL)


def media_kind(path: str) -> str | None:
    """``notebook`` / ``image`` / ``pdf`` for the extensions Claude's Read turns into blocks, else None."""
    extension = os.path.splitext(path)[1].lower()
    if extension == ".ipynb":
        return "notebook"
    if extension == ".pdf":
        return "pdf"
    return "image" if extension in IMAGE_EXTENSIONS else None


def missing_file_text(text: str) -> bool:
    """Whether ``text`` is Read's answer for a missing file (2.1.x plain, 2.0.x as a ``<tool_use_error>``)."""
    return text.startswith(("File does not exist.", "<tool_use_error>File does not exist."))


def classify_read(arguments: dict[str, Any], historical: Observation | None, version: str | None) -> str | None:
    """None when a Read can be re-run, else the reason it stays stale (decided before anything is allocated)."""
    path = arguments.get("file_path")
    kind = media_kind(path) if isinstance(path, str) else None
    if kind is None:
        return None
    if historical is not None and historical.is_error:
        if kind == "image" and missing_file_text(historical.text):
            return None  # measured (fixture read_outside): a missing PNG gets Read's missing-file text
        return f"Claude Code's error text for a failed {kind} Read was not measured"
    content = historical.content if historical is not None else None
    if kind == "notebook":
        if historical is not None and not _text_only(content):
            return "the notebook has image outputs, which forkpoint does not reproduce"
        if historical is not None and "Outputs are too large to include." in historical.text:
            return "Claude Code replaced large notebook outputs by a hint whose limits were not measured"
        return None
    if kind == "image":
        if os.path.splitext(path or "")[1].lower() != ".png":
            return "only PNG reads were measured; other image formats are not reproduced"
        if historical is not None and not _passed_through_png(content):
            return ("Claude Code resized or re-encoded the image with its native image library, which forkpoint "
                    "cannot reproduce byte for byte")
        return None
    if version != "2.1.332":
        return "this version sends the PDF in a separate message after the result, which forkpoint does not rebuild"
    if "pages" in arguments:
        return "Read with pages renders page images with poppler, which forkpoint does not reproduce"
    if historical is not None and not _whole_pdf(content):
        return "Claude Code did not send this PDF whole; its page extraction is not reproduced"
    return None


def _text_only(content: Any) -> bool:
    return isinstance(content, list) and all(isinstance(b, dict) and b.get("type") == "text" for b in content)


def _decoded(data: Any) -> bytes | None:
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def _passed_through_png(content: Any) -> bool:
    if not isinstance(content, list) or len(content) != 1 or not isinstance(content[0], dict):
        return False
    source = content[0].get("source")
    if content[0].get("type") != "image" or not isinstance(source, dict) or source.get("media_type") != "image/png":
        return False
    raw = _decoded(source.get("data"))
    return raw is not None and png_within_limits(raw)


def _whole_pdf(content: Any) -> bool:
    if not isinstance(content, list) or len(content) != 2 or not all(isinstance(b, dict) for b in content):
        return False
    head, document = content
    text = head.get("text")
    return (
        head.get("type") == "text" and isinstance(text, str) and _PDF_TEXT.match(text) is not None
        and document.get("type") == "document" and isinstance(document.get("source"), dict)
    )


def png_size(raw: bytes) -> tuple[int, int] | None:
    """Width and height from the IHDR chunk, or None when this is not a PNG."""
    if len(raw) < 24 or not raw.startswith(_PNG_SIGNATURE) or raw[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", raw[16:24])
    return width, height


def png_within_limits(raw: bytes) -> bool:
    """True when every verified version sends this PNG unchanged (no resize, no re-encode)."""
    size = png_size(raw)
    if size is None or len(raw) > IMAGE_MAX_BYTES:
        return False
    width, height = size
    tiles = math.ceil(width / 28) * math.ceil(height / 28)
    return 0 < width <= IMAGE_MAX_SIDE and 0 < height <= IMAGE_MAX_SIDE and tiles <= IMAGE_MAX_TILES


def _out_of_range(path: str, why: str) -> ReplayError:
    return ReplayError(
        ErrorKind.EXECUTOR,
        f"Claude Code Read of {path!r}: {why}; the file differs from the recording and forkpoint does not "
        "reproduce this case",
        before_effect=True,
    )


# ---------------------------------------------------------------------------------------------------- readers


def read_image(path: str, raw: bytes) -> ToolOutcome:
    if not png_within_limits(raw):
        raise _out_of_range(path, "the PNG is outside the sizes Claude Code sends unchanged (it would resize it)")
    size = png_size(raw)
    assert size is not None
    data = base64.b64encode(raw).decode("ascii")
    content = [{"type": "image", "source": {"type": "base64", "data": data, "media_type": "image/png"}}]
    dimensions = {"originalWidth": size[0], "originalHeight": size[1], "displayWidth": size[0],
                  "displayHeight": size[1]}
    native = {"type": "image", "file": {"base64": data, "type": "image/png", "originalSize": len(raw),
                                        "dimensions": dimensions}}
    return ToolOutcome(content, False, native)


def read_pdf(path: str, absolute: str, raw: bytes) -> ToolOutcome:
    if not raw.startswith(b"%PDF-") or len(raw) > PDF_MAX_BYTES:
        raise _out_of_range(path, f"only whole PDFs up to {PDF_MAX_BYTES} bytes with a %PDF- header are reproduced")
    data = base64.b64encode(raw).decode("ascii")
    content = [
        {"type": "text", "text": f"PDF file read: {absolute} ({format_file_size(len(raw))})"},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": data}},
    ]
    native = {"type": "pdf", "file": {"filePath": path, "base64": data, "originalSize": len(raw)}}
    return ToolOutcome(content, False, native)


def read_notebook(path: str, raw: bytes) -> ToolOutcome:
    try:
        notebook = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _out_of_range(path, "the notebook is not valid JSON") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list) or not all(_valid_cell(cell) for cell in cells):
        raise _out_of_range(path, "the notebook's cells are not valid")
    metadata = notebook.get("metadata")
    info = metadata.get("language_info") if isinstance(metadata, dict) else None
    language = info.get("name") if isinstance(info, dict) and info.get("name") is not None else "python"
    rendered = [_cell(path, cell, index, language) for index, cell in enumerate(cells)]
    blocks: list[dict[str, Any]] = []
    for cell, extra in rendered:
        for block in _cell_blocks(cell, extra):
            if blocks and blocks[-1]["type"] == "text":
                blocks[-1]["text"] += "\n" + block["text"]
            else:
                blocks.append(block)
    native = {"type": "notebook", "file": {"filePath": path, "cells": [cell for cell, _ in rendered]}}
    return ToolOutcome(blocks, False, native)


def _valid_cell(cell: Any) -> bool:
    if not isinstance(cell, dict):
        return False
    source = cell.get("source")
    return isinstance(source, str) or (isinstance(source, list) and all(isinstance(s, str) for s in source))


def _joined(value: Any) -> str:
    if isinstance(value, list):
        return "".join(str(part) for part in value)
    return value if isinstance(value, str) else ""


def _cell(path: str, cell: dict[str, Any], index: int, language: Any) -> tuple[dict[str, Any], bool]:
    """Claude's cell record (``toolUseResult.file.cells[i]``) and whether an output had an unknown type."""
    kind = cell.get("cell_type")
    record: dict[str, Any] = {"cellType": kind, "source": _joined(cell.get("source"))}
    if kind == "code" and cell.get("execution_count"):
        record["execution_count"] = cell["execution_count"]
    cell_id = cell.get("id")
    record["cell_id"] = cell_id if cell_id is not None else f"cell-{index}"
    if kind == "code":
        record["language"] = language
    unknown = False
    outputs = cell.get("outputs")
    if kind == "code" and isinstance(outputs, list) and outputs:
        mapped = [_output(path, output) for output in outputs]  # an unknown type stays as null, as in Claude
        unknown = None in mapped
        if sum(len(item["text"]) for item in mapped if item is not None) > NOTEBOOK_OUTPUTS_MAX:
            raise _out_of_range(path, f"a cell's outputs exceed {NOTEBOOK_OUTPUTS_MAX} characters")
        record["outputs"] = mapped
    return record, unknown


def _output(path: str, output: Any) -> dict[str, Any] | None:
    kind = output.get("output_type") if isinstance(output, dict) else None
    if kind == "stream":
        return {"output_type": kind, "text": _joined(output.get("text"))}
    if kind in ("execute_result", "display_data"):
        data = output.get("data")
        if isinstance(data, dict) and any(isinstance(data.get(k), str) for k in ("image/png", "image/jpeg")):
            raise _out_of_range(path, "the notebook has image outputs")
        return {"output_type": kind, "text": _joined(data.get("text/plain") if isinstance(data, dict) else None)}
    if kind == "error":
        traceback = output.get("traceback")
        lines = [f"{_js_string(output, 'ename')}: {_js_string(output, 'evalue')}"]
        lines += [line if isinstance(line, str) else orjson.dumps(line).decode() for line in traceback] if isinstance(
            traceback, list) else []
        return {"output_type": kind, "text": "\n".join(lines)}
    return None


def _js_string(output: dict[str, Any], key: str) -> str:
    """``${output[key]}`` as JavaScript prints it (a missing key is ``undefined``; only strings were measured)."""
    if key not in output:
        return "undefined"
    value = output[key]
    if isinstance(value, str):
        return value
    return "null" if value is None else orjson.dumps(value).decode()


def _cell_blocks(cell: dict[str, Any], unknown: bool) -> list[dict[str, Any]]:
    tags = ""
    if cell["cellType"] != "code":
        tags += f"<cell_type>{cell['cellType']}</cell_type>"
    if cell["cellType"] == "code" and cell.get("language") != "python":
        tags += f"<language>{cell['language']}</language>"
    blocks = [{"text": f'<cell id="{cell["cell_id"]}">{tags}{cell["source"]}</cell id="{cell["cell_id"]}">',
               "type": "text"}]
    outputs = [item for item in cell.get("outputs", []) if item is not None]
    blocks += [{"text": f"\n{item['text']}", "type": "text"} for item in outputs if item["text"]]
    if unknown:
        blocks.append({"text": "\nOutputs of an unknown type are not shown.", "type": "text"})
    return blocks
