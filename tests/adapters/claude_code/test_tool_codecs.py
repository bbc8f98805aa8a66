"""Claude's text codecs (``tool_codecs``, pure): decoding, encoding and jsdiff-shaped patches."""

from __future__ import annotations

from forkpoint.adapters.claude_code.tool_codecs import decode_text, is_valid_utf8, structured_patch, to_utf8, uses_crlf


def test_decoding_drops_a_bom_replaces_invalid_bytes_and_reads_crlf_as_lf() -> None:
    assert decode_text(b"\xef\xbb\xbfa\r\nb\xff\n") == ("a\nb\ufffd\n", True)
    assert decode_text("hi\r\n".encode("utf-16"), utf16_bom=True) == ("hi\n", False)
    assert decode_text("hi".encode("utf-16"))[0].startswith("\ufffd\ufffdh\x00")  # 2.1.220 reads it as UTF-8


def test_utf8_validity_forgives_only_a_character_cut_at_the_end() -> None:
    cut = "é".encode()[:1]
    assert is_valid_utf8(b"ok" + cut, partial=True)
    assert not is_valid_utf8(b"ok" + cut, partial=False)
    assert not is_valid_utf8(b"\xff", partial=True)


def test_a_file_is_crlf_when_most_newlines_are() -> None:
    assert uses_crlf(b"a\r\nb\r\nc\n")
    assert not uses_crlf(b"a\r\nb\nc\n")
    assert not uses_crlf(b"no newline")


def test_encoding_turns_a_lone_surrogate_into_a_replacement_character() -> None:
    assert to_utf8("a\ud800b") == "a\ufffdb".encode()
    assert to_utf8("plain é") == "plain é".encode()


def test_structured_patch_has_jsdiff_hunks_with_three_lines_of_context() -> None:
    old = "".join(f"{n}\n" for n in range(1, 21))
    new = old.replace("10\n", "ten\n")
    assert structured_patch(old, new) == [{
        "oldStart": 7, "oldLines": 7, "newStart": 7, "newLines": 7,
        "lines": [" 7", " 8", " 9", "-10", "+ten", " 11", " 12", " 13"],
    }]
    assert structured_patch(old, old) == []


def test_structured_patch_marks_a_missing_final_newline() -> None:
    assert structured_patch("a\nb", "a\nc") == [{
        "oldStart": 1, "oldLines": 2, "newStart": 1, "newLines": 2,
        "lines": [" a", "-b", "\\ No newline at end of file", "+c", "\\ No newline at end of file"],
    }]
