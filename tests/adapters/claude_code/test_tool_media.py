"""Claude Code's Read of notebooks, PNGs and PDFs: the reproduced output text, and the stale decisions made
from the recorded observation at parse time (so inspect, prepare and replay agree before anything is allocated).

The exact texts were measured on the real binaries (fixture ``read_media``; test_fixture_fidelity proves those
calls byte for byte); the edge cases below follow 2.1.332's bundled notebook renderer.
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.adapters.claude_code.tool_media import classify_read, png_within_limits
from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import CallPolicy, FreshObservation, Observation, RunContext, ToolCall
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

SESSION = "11111111-2222-3333-4444-555555555555"
Run = Callable[..., FreshObservation]


def png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    rows = (b"\0" + b"\x10\x20\x30" * width) * height
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out")
    executor = ClaudeToolExecutor(context, "2.1.332", SESSION, tmp_path / "home" / ".claude")
    counter = iter(range(1_000_000))

    def call(name: str, **arguments: Any) -> FreshObservation:
        return executor.run(ToolCall(f"toolu_{next(counter)}", name, arguments, None))

    yield call
    executor.close()


def _ws(tmp_path: Path) -> Path:
    return tmp_path / "ws"


def test_notebook_read_renders_cells_like_claude(run: Run, tmp_path: Path) -> None:
    notebook = {
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# T\n", "x"]},  # no id: cell-0
            {"cell_type": "code", "execution_count": None, "id": "c1", "metadata": {}, "source": "1",
             "outputs": [{"output_type": "display_data", "data": {"text/html": ["<b/>"]}, "metadata": {}},
                         {"output_type": "weird"},
                         {"output_type": "error", "ename": "E", "evalue": "v", "traceback": []}]},
            {"cell_type": "code", "execution_count": 3, "id": "c2", "metadata": {}, "source": ["a\n", "b"],
             "outputs": []},
        ],
        "metadata": {"language_info": {"name": "julia"}}, "nbformat": 4, "nbformat_minor": 5,
    }
    (_ws(tmp_path) / "n.ipynb").write_text(json.dumps(notebook))
    result = run("Read", file_path=str(_ws(tmp_path) / "n.ipynb"))
    assert not result.is_error
    assert result.content == [{"text": (
        '<cell id="cell-0"><cell_type>markdown</cell_type># T\nx</cell id="cell-0">\n'
        '<cell id="c1"><language>julia</language>1</cell id="c1">\n'
        "\nE: v\n\nOutputs of an unknown type are not shown.\n"
        '<cell id="c2"><language>julia</language>a\nb</cell id="c2">'
    ), "type": "text"}]
    cells = result.native["file"]["cells"]
    assert cells[0] == {"cellType": "markdown", "source": "# T\nx", "cell_id": "cell-0"}
    assert cells[1] == {"cellType": "code", "source": "1", "cell_id": "c1", "language": "julia", "outputs": [
        {"output_type": "display_data", "text": ""}, None, {"output_type": "error", "text": "E: v"}]}
    assert cells[2] == {"cellType": "code", "source": "a\nb", "execution_count": 3, "cell_id": "c2",
                        "language": "julia"}
    assert list(cells[2]) == ["cellType", "source", "execution_count", "cell_id", "language"]


def test_notebook_outside_the_measured_range_is_an_executor_error(run: Run, tmp_path: Path) -> None:
    big = {"cells": [{"cell_type": "code", "id": "a", "source": "x", "metadata": {},
                      "outputs": [{"output_type": "stream", "name": "stdout", "text": "y" * 10_001}]}],
           "metadata": {}}
    image = {"cells": [{"cell_type": "code", "id": "a", "source": "x", "metadata": {},
                        "outputs": [{"output_type": "display_data", "data": {"image/png": "aGk="}}]}],
             "metadata": {}}
    for name, body in (("big.ipynb", json.dumps(big)), ("img.ipynb", json.dumps(image)), ("bad.ipynb", "{")):
        (_ws(tmp_path) / name).write_text(body)
        with pytest.raises(ReplayError) as error:
            run("Read", file_path=str(_ws(tmp_path) / name))
        assert error.value.kind is ErrorKind.EXECUTOR and error.value.before_effect


def test_small_png_is_sent_unchanged_and_a_large_one_is_refused_before_effect(run: Run, tmp_path: Path) -> None:
    small = png(4, 3)
    (_ws(tmp_path) / "s.png").write_bytes(small)
    result = run("Read", file_path="s.png")
    data = base64.b64encode(small).decode()
    assert result.content == [{"type": "image", "source": {"type": "base64", "data": data,
                                                           "media_type": "image/png"}}]
    assert result.native["file"]["dimensions"] == {"originalWidth": 4, "originalHeight": 3, "displayWidth": 4,
                                                   "displayHeight": 3}
    (_ws(tmp_path) / "b.png").write_bytes(png(2000, 10))
    with pytest.raises(ReplayError) as error:
        run("Read", file_path="b.png")
    assert error.value.kind is ErrorKind.EXECUTOR and "resize" in error.value.message


def test_pdf_is_sent_whole_as_a_document(run: Run, tmp_path: Path) -> None:
    raw = b"%PDF-1.4\n% tiny\n%%EOF\n"
    (_ws(tmp_path) / "d.pdf").write_bytes(raw)
    result = run("Read", file_path="d.pdf")
    absolute = str((_ws(tmp_path) / "d.pdf").resolve())
    assert result.content == [
        {"type": "text", "text": f"PDF file read: {absolute} ({len(raw)} bytes)"},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf",
                                        "data": base64.b64encode(raw).decode()}},
    ]


def test_png_limits_hold_for_every_model_of_both_versions() -> None:
    assert png_within_limits(png(1568, 28))
    assert not png_within_limits(png(1569, 1))  # one side too long for the 1568-px models
    assert not png_within_limits(png(1200, 1200))  # 43 x 43 tiles > 1568
    assert not png_within_limits(b"GIF89a" + b"\0" * 30)


def _image(data: bytes, media_type: str = "image/png") -> Observation:
    return Observation([{"type": "image", "source": {"type": "base64", "data": base64.b64encode(data).decode(),
                                                     "media_type": media_type}}])


@pytest.mark.parametrize(("arguments", "historical", "version", "stale"), [
    ({"file_path": "/w/a.ipynb"}, Observation([{"text": "<cell", "type": "text"}]), "2.1.220", False),
    ({"file_path": "/w/a.ipynb"}, Observation([{"text": "x", "type": "text"}, {"type": "image"}]), "2.1.332", True),
    ({"file_path": "/w/a.ipynb"}, Observation([{"text": "\nOutputs are too large to include. Use Bash",
                                                "type": "text"}]), "2.1.332", True),
    ({"file_path": "/w/a.ipynb"}, Observation("File does not exist.", is_error=True), "2.1.332", True),
    ({"file_path": "/w/a.png"}, _image(png(4, 3)), "2.1.220", False),
    ({"file_path": "/w/a.png"}, _image(png(2000, 1333)), "2.1.332", True),  # resized by the binary
    ({"file_path": "/w/a.PNG"}, None, "2.1.332", False),  # no recorded result: decided at run time
    ({"file_path": "/w/a.jpg"}, _image(b"\xff\xd8", "image/jpeg"), "2.1.332", True),
    ({"file_path": "/w/a.pdf"}, Observation([{"type": "text", "text": "PDF file read: /w/a.pdf (5 bytes)"},
                                             {"type": "document", "source": {}}]), "2.1.332", False),
    ({"file_path": "/w/a.pdf"}, Observation("PDF file read: /w/a.pdf (5 bytes)"), "2.1.220", True),
    ({"file_path": "/w/a.pdf", "pages": "1-2"}, None, "2.1.332", True),
    ({"file_path": "/w/a.txt"}, Observation("1\tx"), "2.1.332", False),
])
def test_media_reads_are_classified_from_the_recorded_result(
    arguments: dict[str, Any], historical: Observation | None, version: str, stale: bool
) -> None:
    assert (classify_read(arguments, historical, version) is not None) is stale


def test_inspect_and_replay_agree_on_media_reads(tmp_path: Path) -> None:
    """The decision is in the parsed trajectory: a resized image is stale there, a notebook fresh."""
    builder = ClaudeSessionBuilder(version="2.1.332")
    builder.user_prompt("look")
    builder.assistant([tool_use("nb", "Read", {"file_path": "/work/a.ipynb"})])
    builder.results({"nb": [{"text": '<cell id="a">x</cell id="a">', "type": "text"}]})
    builder.assistant([tool_use("img", "Read", {"file_path": "/work/big.png"})])
    builder.results({"img": _image(png(2000, 1333)).content})
    builder.assistant([text("done")])
    parsed = parse_session(builder.write(tmp_path / "s.jsonl"))
    first, second = (batch.calls[0] for batch in parsed.batches)
    assert first.policy is CallPolicy.FRESH
    assert second.policy is CallPolicy.STALE and "image library" in (second.policy_reason or "")


@pytest.mark.parametrize(("version", "refused"), [("2.1.220", {3, 4}), ("2.1.332", {3})])
def test_a_boundary_followed_by_claude_meta_message_is_refused(version: str, refused: set[int]) -> None:
    """A resized image's ``[Image: original …]`` note (both versions) and 2.1.220's PDF document follow the result
    as a separate meta message the original model saw; a resumed session cannot end with it."""
    session = Path(__file__).parents[2] / "fixtures" / "claude_code" / version / "read_media" / "session.jsonl"
    parsed = parse_session(session)
    assert set(parsed.boundary_refusals) == refused
    assert all("meta message" in reason for reason in parsed.boundary_refusals.values())
