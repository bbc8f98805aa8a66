"""NotebookEdit on hostile and malformed input: the real binary's texts, or a precise refusal before any effect.

The measured behaviour (replace / insert / delete, ids, bytes) is proven on the real fixtures in
``test_fixture_fidelity``; these cases are the ones a recording cannot safely contain.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from forkpoint.adapters.claude_code.jstext import js_json_parse, js_json_stringify
from forkpoint.adapters.claude_code.tool_notebook import NOT_A_NOTEBOOK
from forkpoint.core.errors import ErrorKind, ReplayError

from .conftest import Run

NEW = "2.1.332"
NOTEBOOK = json.dumps({"cells": [{"cell_type": "code", "id": "a", "metadata": {}, "source": "1",
                                  "execution_count": 1, "outputs": []}],
                       "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1) + "\n"


def _read(run: Run, workspace: Path, text: str = NOTEBOOK) -> Path:
    notebook = workspace / "nb.ipynb"
    notebook.write_text(text)
    assert not run("Read", file_path=str(notebook)).is_error
    return notebook


def test_replace_writes_the_cell_and_reports_like_claude(make: Callable[[str], Run], workspace: Path) -> None:
    run = make(NEW)
    notebook = _read(run, workspace)
    result = run("NotebookEdit", notebook_path=str(notebook), cell_id="a", new_source="2")
    assert (result.content, result.is_error) == ("Updated cell a with 2", False)
    cell = json.loads(notebook.read_text())["cells"][0]
    assert cell == {"cell_type": "code", "id": "a", "metadata": {}, "source": "2", "execution_count": None,
                    "outputs": []}


def test_a_notebook_never_read_is_claudes_refusal(make: Callable[[str], Run], workspace: Path) -> None:
    run = make(NEW)
    (workspace / "nb.ipynb").write_text(NOTEBOOK)
    result = run("NotebookEdit", notebook_path=str(workspace / "nb.ipynb"), cell_id="a", new_source="2")
    assert result.is_error and result.content == (
        "<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>")
    assert (workspace / "nb.ipynb").read_text() == NOTEBOOK


def test_symlink_to_a_notebook_outside_is_refused_and_the_outside_file_untouched(
        make: Callable[[str], Run], workspace: Path, tmp_path: Path) -> None:
    run = make(NEW)
    notebook = _read(run, workspace)
    outside = tmp_path / "outside.ipynb"
    outside.write_text(NOTEBOOK)
    os.utime(outside, ns=(0, 0))  # older than the read: only the link can stop the edit
    notebook.unlink()
    notebook.symlink_to(outside)
    with pytest.raises(ReplayError) as error:
        run("NotebookEdit", notebook_path=str(notebook), cell_id="a", new_source="2")
    assert error.value.kind is ErrorKind.EXECUTOR and error.value.before_effect
    assert "symlink" in error.value.message and "NotebookEdit" in error.value.message
    assert outside.read_text() == NOTEBOOK


def test_a_fifo_where_the_notebook_was_is_a_tool_error_not_a_hang(
        make: Callable[[str], Run], workspace: Path) -> None:
    run = make(NEW)
    notebook = _read(run, workspace)
    notebook.unlink()
    os.mkfifo(notebook)
    result = run("NotebookEdit", notebook_path=str(notebook), cell_id="a", new_source="2")
    assert result.is_error and result.content == (
        f"NotebookEdit refused by forkpoint replay: {notebook} is not a regular file")


def test_a_huge_notebook_is_refused_before_any_effect(make: Callable[[str], Run], workspace: Path) -> None:
    run = make(NEW)
    notebook = _read(run, workspace)
    stat = notebook.stat()
    huge = NOTEBOOK[:-2] + ', "pad": "' + "x" * (17 * 1024 * 1024) + '"}\n'
    notebook.write_text(huge)
    os.utime(notebook, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    with pytest.raises(ReplayError) as error:
        run("NotebookEdit", notebook_path=str(notebook), cell_id="a", new_source="2")
    assert error.value.before_effect and "edit budget" in error.value.message
    assert notebook.read_text() == huge


@pytest.mark.parametrize("arguments", [
    {"cell_id": "a", "new_source": "2", "cell_type": "python"},
    {"cell_id": "a"},
    {"cell_id": 3, "new_source": "2"},
    {"cell_id": "a", "new_source": "2", "edit_mode": "append"},
])
def test_malformed_input_is_refused_before_any_effect(
        make: Callable[[str], Run], workspace: Path, arguments: dict[str, object]) -> None:
    run = make(NEW)
    notebook = _read(run, workspace)
    with pytest.raises(ReplayError) as error:
        run("NotebookEdit", notebook_path=str(notebook), **arguments)
    assert error.value.before_effect and "NotebookEdit call input is not the tool's schema" in error.value.message
    assert notebook.read_text() == NOTEBOOK


@pytest.mark.parametrize(("text", "message"), [
    ("{not json", "Notebook is not valid JSON."),
    ('{"cells": [1]}', NOT_A_NOTEBOOK),
    ('{"cells": [{"source": "x", "id": "b"}]}', 'Cell with ID "a" not found in notebook.'),
    ('{"cells": [{"source": "x"}], "n": NaN}', "Notebook is not valid JSON."),
])
def test_broken_notebooks_give_claudes_error_text(
        make: Callable[[str], Run], workspace: Path, text: str, message: str) -> None:
    run = make(NEW)
    notebook = _read(run, workspace)
    stat = notebook.stat()
    notebook.write_text(text)  # changed behind the session's back, with the mtime it had when read
    os.utime(notebook, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    result = run("NotebookEdit", notebook_path=str(notebook), cell_id="a", new_source="2")
    assert result.is_error and result.content == f"<tool_use_error>{message}</tool_use_error>"
    assert notebook.read_text() == text


def test_the_notebook_is_written_back_as_javascript_would(make: Callable[[str], Run], workspace: Path) -> None:
    """Numbers and property order are JavaScript's (``JSON.parse`` + ``JSON.stringify``), not Python's."""
    run = make(NEW)
    text = ('{"cells": [{"id": "a", "source": "1", "cell_type": "markdown"}], '
            '"metadata": {"b": 1.0, "2": 1e-7, "1": 0.00001, "big": 12345678901234567890}, "nbformat": 4}')
    notebook = _read(run, workspace, text)
    run("NotebookEdit", notebook_path=str(notebook), cell_id="a", new_source="2")
    assert notebook.read_text() == (
        '{\n "cells": [\n  {\n   "id": "a",\n   "source": "2",\n   "cell_type": "markdown"\n  }\n ],\n'
        ' "metadata": {\n  "1": 0.00001,\n  "2": 1e-7,\n  "b": 1,\n  "big": 12345678901234567000\n },\n'
        ' "nbformat": 4\n}')


def test_js_json_round_trip_keeps_lone_surrogates_escaped() -> None:
    assert js_json_stringify(js_json_parse('["\\ud800", "\\u0001", "é"]'), 1) == '[\n "\\ud800",\n "\\u0001",\n "é"\n]'
