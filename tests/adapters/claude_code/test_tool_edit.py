"""Claude Code's Write and Edit (``tool_edit``) through the executor: texts, errors, line endings, and the
session's per-file state (as measured on the real 2.1.220 / 2.1.332 binaries)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forkpoint.core.model import FreshObservation

OLD, NEW = "2.1.220", "2.1.332"
BOTH = pytest.mark.parametrize("version", [OLD, NEW])

Run = Callable[..., FreshObservation]  # the conftest's ``make(version)`` gives one
CONTEXT_NOTE = " (file state is current in your context — no need to Read it back)"


@BOTH
def test_edit_errors(make: Callable[[str], Run], workspace: Path, version: str) -> None:
    run = make(version)
    (workspace / "e.txt").write_text("foo bar foo\nbaz\n")

    def error(**arguments: Any) -> str:
        observation = run("Edit", **arguments)
        assert observation.is_error
        opening, closing = "<tool_use_error>", "</tool_use_error>"
        assert observation.content.startswith(opening) and observation.content.endswith(closing)
        assert observation.native == "Error: " + observation.content[len(opening) : -len(closing)]
        return str(observation.native).removeprefix("Error: ")

    assert error(file_path="e.txt", old_string="nope", new_string="x") == (
        "String to replace not found in file.\nString: nope"
    )
    assert error(file_path="e.txt", old_string="foo", new_string="FOO") == (
        "Found 2 matches of the string to replace, but replace_all is false. To replace all occurrences, set "
        "replace_all to true. To replace only one occurrence, please provide more context to uniquely identify "
        "the instance.\nString: foo"
    )
    assert error(file_path="e.txt", old_string="baz", new_string="baz") == (
        "No changes to make: old_string and new_string are exactly the same."
    )
    assert error(file_path="missing.txt", old_string="a", new_string="b") == (
        f"File does not exist. Note: your current working directory is {workspace}."
    )
    assert error(file_path="e.txt", old_string="", new_string="x") == "Cannot create new file - file already exists."
    assert (workspace / "e.txt").read_text() == "foo bar foo\nbaz\n"


@pytest.mark.parametrize("version", [OLD, NEW])
def test_edit_success_texts(make: Callable[[str], Run], workspace: Path, version: str) -> None:
    run = make(version)
    (workspace / "e.txt").write_text("foo bar foo\nbaz\n")
    unread = run("Edit", file_path="e.txt", old_string="foo", new_string="FOO", replace_all=True)
    tracks = version == NEW
    assert unread.content == "The file e.txt has been updated. All occurrences were successfully replaced." + (
        "" if tracks else CONTEXT_NOTE
    )
    assert unread.native["structuredPatch"] == [
        {"oldStart": 1, "oldLines": 2, "newStart": 1, "newLines": 2, "lines": ["-foo bar foo", "+FOO bar FOO", " baz"]}
    ]
    assert unread.native.get("contentNotInModelContext") is (True if tracks else None)
    run("Read", file_path="e.txt")
    read = run("Edit", file_path="e.txt", old_string="baz", new_string="")
    assert read.content == f"The file e.txt has been updated successfully.{CONTEXT_NOTE}"
    assert (workspace / "e.txt").read_text() == "FOO bar FOO\n"  # deleting a line eats its newline
    created = run("Edit", file_path="new/n.txt", old_string="", new_string="made\n")
    assert created.content == f"The file new/n.txt has been updated successfully.{CONTEXT_NOTE}"
    assert (workspace / "new" / "n.txt").read_text() == "made\n"


def test_edit_keeps_line_endings_and_normalises_input(make: Callable[[str], Run], workspace: Path) -> None:
    run = make(NEW)
    (workspace / "crlf.txt").write_bytes(b"a\r\nb\r\n")
    (workspace / "ws.txt").write_text("keep\n")
    (workspace / "ws.md").write_text("keep\n")
    (workspace / "q.txt").write_text("say \u201chi\u201d\n")
    run("Edit", file_path="crlf.txt", old_string="a\nb", new_string="A\nB")
    assert (workspace / "crlf.txt").read_bytes() == b"A\r\nB\r\n"
    run("Edit", file_path="ws.txt", old_string="keep", new_string="x  \ny\t")
    run("Edit", file_path="ws.md", old_string="keep", new_string="x  \ny\t")
    assert (workspace / "ws.txt").read_text() == "x\ny\n"
    assert (workspace / "ws.md").read_text() == "x  \ny\t\n"
    quoted = run("Edit", file_path="q.txt", old_string='say "hi"', new_string="said")
    assert quoted.native["oldString"] == "say \u201chi\u201d" and (workspace / "q.txt").read_text() == "said\n"


@BOTH
def test_edit_after_the_file_changed_on_disk(make: Callable[[str], Run], workspace: Path, version: str) -> None:
    run = make(version)
    (workspace / "m.txt").write_text("mod\n")
    run("Read", file_path="m.txt")
    run("Bash", command="echo changed > m.txt")
    applied = run("Edit", file_path="m.txt", old_string="changed", new_string="C")
    assert applied.content.startswith("The file m.txt has been updated successfully. (note: the file had been modified")
    assert applied.native["staleRecovered"] is True
    run("Read", file_path="m.txt")
    run("Bash", command="echo other > m.txt")
    refused = run("Edit", file_path="m.txt", old_string="C", new_string="D")
    assert refused.content == (
        "<tool_use_error>File has been modified since read, either by the user or by a linter. Read it again before "
        "attempting to write it.</tool_use_error>"
    )
    assert run("Write", file_path="m.txt", content="w\n").content == refused.content
    run("Bash", command="touch m.txt")  # rewrites nothing: an mtime change alone is not a change
    run("Read", file_path="m.txt")
    run("Bash", command="touch m.txt")
    assert not run("Write", file_path="m.txt", content="w\n").is_error


def test_write_needs_a_read_on_2_1_220_only(make: Callable[[str], Run], workspace: Path) -> None:
    (workspace / "w.txt").write_text("existing\n")
    old = make(OLD)
    refused = old("Write", file_path="w.txt", content="new\n")
    assert refused.is_error
    assert refused.content == (
        "<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>"
    )
    assert (workspace / "w.txt").read_text() == "existing\n"
    old("Read", file_path="w.txt", offset=1, limit=1)  # a partial Read is enough
    written = old("Write", file_path="w.txt", content="new\n")
    assert written.content == f"The file w.txt has been updated successfully.{CONTEXT_NOTE}"
    assert written.native["type"] == "update" and written.native["originalFile"] == "existing\n"
    (workspace / "v.txt").write_text("existing\n")
    assert not make(NEW)("Write", file_path="v.txt", content="new\n").is_error
    created = old("Write", file_path=str(workspace / "deep" / "er" / "n.txt"), content="x")
    assert created.content == f"File created successfully at: {workspace / 'deep' / 'er' / 'n.txt'}{CONTEXT_NOTE}"
    assert created.native == {
        "type": "create", "filePath": str(workspace / "deep" / "er" / "n.txt"), "content": "x",
        "structuredPatch": [], "originalFile": None, "userModified": False,
    }


def test_write_to_a_directory(make: Callable[[str], Run], workspace: Path) -> None:
    (workspace / "sub").mkdir()
    assert make(OLD)("Write", file_path="sub", content="x").content == (
        "<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>"
    )
    assert make(NEW)("Write", file_path="sub", content="x").content == (
        f"<tool_use_error>{workspace / 'sub'} is a directory, not a file. To create a file inside it, include the "
        "file name in file_path.</tool_use_error>"
    )
