"""Codex's apply_patch grammar and matching (``tool_patch_grammar``, pure): hunks, seek_sequence, new file text."""

from __future__ import annotations

import pytest

from forkpoint.adapters.codex.tool_patch_grammar import (
    Chunk,
    PatchParseError,
    PatchVerifyError,
    parse_patch,
    seek_sequence,
    updated_contents,
)


def test_a_patch_parses_into_add_delete_and_update_hunks() -> None:
    text = ("  *** Begin Patch\n*** Add File: a.txt\n+one\n+two\n*** Delete File: b.txt\n"
            "*** Update File: c.txt\n*** Move to: d.txt\n@@ def f():\n-    pass\n+    return 1\n*** End of File\n"
            "*** End Patch\n\n")
    add, delete, update = parse_patch(text)
    assert (add.kind, add.path, add.contents) == ("add", "a.txt", "one\ntwo\n")
    assert (delete.kind, delete.path) == ("delete", "b.txt")
    assert (update.kind, update.path, update.move_path) == ("update", "c.txt", "d.txt")
    assert update.chunks == [Chunk("def f():", ["    pass"], ["    return 1"], is_end_of_file=True)]


def test_a_heredoc_wrapper_is_accepted_and_broken_grammar_names_the_line() -> None:
    assert parse_patch("<<'EOF'\n*** Begin Patch\n*** Delete File: x\n*** End Patch\nEOF")[0].path == "x"
    with pytest.raises(PatchParseError) as caught:
        parse_patch("*** Begin Patch\n*** Update File: x\n@@\n?bad\n*** End Patch")
    assert caught.value.message.startswith("invalid hunk at line 4, Unexpected line found in update hunk: '?bad'")


def test_seek_sequence_tries_decreasing_strictness() -> None:
    lines = ["alpha  ", "  beta", "He said \u201chi\u201d \u2014 ok"]
    assert seek_sequence(lines, ["alpha"], 0, False) == 0  # trailing whitespace ignored
    assert seek_sequence(lines, ["beta"], 0, False) == 1  # surrounding whitespace ignored
    assert seek_sequence(lines, ['He said "hi" - ok'], 0, False) == 2  # punctuation folded
    assert seek_sequence(lines, ["alpha"], 1, False) is None
    assert seek_sequence(lines, [], 2, False) == 2


def test_updated_contents_per_line_ending_rule() -> None:
    chunks = [Chunk(None, ["line1", "line2"], ["line1", "LINE2"])]
    original = "line1\r\nline2\r\nline3\r\n"
    assert updated_contents(original, "f", chunks, preserve_line_endings=False) == "line1\nLINE2\nline3\r\n"
    assert updated_contents(original, "f", chunks, preserve_line_endings=True) == "line1\r\nLINE2\r\nline3\r\n"
    with pytest.raises(PatchVerifyError) as caught:
        updated_contents("other\n", "/ws/f", chunks, preserve_line_endings=True)
    assert caught.value.message == "Failed to find expected lines in /ws/f:\nline1\nline2"
