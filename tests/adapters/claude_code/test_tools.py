"""ClaudeToolExecutor: Claude Code's tool semantics and texts (as measured on the real 2.1.220 / 2.1.332 binaries),
plus forkpoint's confinement and safety budgets."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.claude_code.jstext import format_file_size, js_len, js_slice, js_trim
from forkpoint.adapters.claude_code.launch import project_dir_name
from forkpoint.adapters.claude_code.tool_files import OUTPUT_NOTICE, SCAN_NOTICE
from forkpoint.adapters.claude_code.tool_profile import profile_for_version
from forkpoint.adapters.claude_code.tools import (
    PERSISTED_PATH_PLACEHOLDER,
    ClaudeToolExecutor,
    normalize_volatile,
)
from forkpoint.errors import ErrorKind, ReplayError
from forkpoint.model import FreshObservation, RunContext, ToolCall

OLD, NEW = "2.1.220", "2.1.332"
BOTH = pytest.mark.parametrize("version", [OLD, NEW])
SESSION = "11111111-2222-3333-4444-555555555555"
CONTEXT_NOTE = " (file state is current in your context — no need to Read it back)"

Run = Callable[..., FreshObservation]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def make(tmp_path: Path, workspace: Path) -> Iterator[Callable[[str], Run]]:
    executors: list[ClaudeToolExecutor] = []

    def factory(version: str) -> Run:
        context = RunContext(workspace, tmp_path / "state", tmp_path / "out")
        executor = ClaudeToolExecutor(context, version, SESSION, tmp_path / "home" / ".claude")
        executors.append(executor)
        counter = iter(range(1_000_000))

        def run(name: str, **arguments: Any) -> FreshObservation:
            return executor.run(ToolCall(f"toolu_{next(counter)}", name, arguments, None))

        return run

    yield factory
    for executor in executors:
        executor.close()


# ------------------------------------------------------------------------------------------------ normalisation


def test_normalize_volatile_masks_only_the_persisted_output_path() -> None:
    text = (
        "<persisted-output>\nOutput too large (42.9KB). Full output saved to: /h/.claude/projects/-w/s/tool-results/"
        "bcgz00dro.txt\n\nPreview (first 2KB):\n1\n2\n...\n</persisted-output>"
    )
    expected = text.replace("/h/.claude/projects/-w/s/tool-results/bcgz00dro.txt", PERSISTED_PATH_PLACEHOLDER)
    assert normalize_volatile(text) == expected
    assert normalize_volatile(text.replace("bcgz00dro", "b12345678")) == expected
    assert normalize_volatile(text.replace("42.9KB", "43KB")) != expected  # the size is not volatile
    assert normalize_volatile("Full output saved to: /x.txt") == "Full output saved to: /x.txt"  # outside the block
    assert normalize_volatile([{"type": "text", "text": text}, {"type": "image"}]) == [
        {"type": "text", "text": expected},
        {"type": "image"},
    ]
    assert normalize_volatile(None) is None


def test_js_string_helpers() -> None:
    assert js_len("a😀") == 3
    assert js_slice("a😀b", 0, 2) == "a"  # a cut through a surrogate pair drops the character
    assert js_slice("a😀b", 0, 3) == "a😀"
    assert js_trim("\ufeff x\u00a0") == "x"
    assert js_trim("\x1c") == "\x1c"  # not JS whitespace
    assert [format_file_size(n) for n in (512, 2000, 43893, 60000, 262145, 1280)] == [
        "512 bytes", "2KB", "42.9KB", "58.6KB", "256KB", "1.3KB"  # toFixed rounds half up
    ]


def test_unverified_versions_are_refused() -> None:
    with pytest.raises(ReplayError) as error:
        profile_for_version("2.0.1")
    assert error.value.kind is ErrorKind.UNSUPPORTED_VERSION
    assert profile_for_version("2.1.250").version == OLD
    assert profile_for_version("2.1.400").version == NEW


# ------------------------------------------------------------------------------------------------ Read


@BOTH
def test_read_numbers_lines_like_claude(make: Callable[[str], Run], workspace: Path, version: str) -> None:
    run = make(version)
    (workspace / "a.txt").write_text("one\ntwo\n")
    (workspace / "crlf.txt").write_bytes(b"\xef\xbb\xbfa\r\nb\r\n")
    (workspace / "tabs.txt").write_text("\tx\n  y\n")
    observation = run("Read", file_path=str(workspace / "a.txt"))
    assert (observation.content, observation.is_error) == ("1\tone\n2\ttwo\n3\t", False)
    assert observation.native == {
        "type": "text",
        "file": {"filePath": str(workspace / "a.txt"), "content": "one\ntwo\n", "numLines": 3, "startLine": 1,
                 "totalLines": 3},
    }
    assert run("Read", file_path="crlf.txt").content == "1\ta\n2\tb\n3\t"
    assert run("Read", file_path="a.txt", offset=2, limit=1).content == "2\ttwo"
    assert run("Read", file_path="tabs.txt", offset=0).content == "0\t\tx\n1\t  y\n2\t"
    assert run("Read", file_path="tabs.txt", limit=0).content == "1\t\tx\n2\t  y\n3\t"


@BOTH
def test_read_reminders_are_not_errors(make: Callable[[str], Run], workspace: Path, version: str) -> None:
    run = make(version)
    (workspace / "empty.txt").write_text("")
    (workspace / "short.txt").write_text("a\nb\nc\n")
    empty = run("Read", file_path="empty.txt")
    assert empty.content == "<system-reminder>Warning: the file exists but the contents are empty.</system-reminder>"
    assert not empty.is_error
    past = run("Read", file_path="short.txt", offset=100)
    assert past.content == (
        "<system-reminder>Warning: the file exists but is shorter than the provided offset (100). "
        "The file has 4 lines.</system-reminder>"
    )
    assert not past.is_error
    assert run("Read", file_path="short.txt", offset=4).content == "4\t"


@BOTH
def test_read_missing_nested_path_and_directory(make: Callable[[str], Run], workspace: Path, version: str) -> None:
    run = make(version)
    (workspace / "notes.txt").write_text("n\n")
    (workspace / "dir").mkdir()
    missing = run("Read", file_path=str(workspace / "missing" / "nested" / "file.txt"))
    assert missing.is_error
    assert missing.content == f"File does not exist. Note: your current working directory is {workspace}."
    assert missing.native == f"Error: {missing.content}"
    similar = run("Read", file_path="notes.md")
    assert similar.content.endswith(f"directory is {workspace}. Did you mean notes.txt?")
    directory = run("Read", file_path="dir")
    assert directory.is_error
    assert directory.content == f"EISDIR: illegal operation on a directory, read '{workspace / 'dir'}'"


def test_read_fifo_is_a_prompt_tool_error(make: Callable[[str], Run], workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    started = time.monotonic()
    observation = make(NEW)("Read", file_path="pipe")
    assert time.monotonic() - started < 2
    assert observation.is_error and "not a regular file" in observation.content


def test_read_dev_zero_through_a_symlink_is_a_tool_error(make: Callable[[str], Run], workspace: Path) -> None:
    os.symlink("/dev/zero", workspace / "zero")
    started = time.monotonic()
    observation = make(NEW)("Read", file_path="zero", limit=1)
    assert time.monotonic() - started < 2
    assert observation.is_error and "not a regular file" in observation.content


def test_read_symlink_to_a_file_outside_is_refused(make: Callable[[str], Run], workspace: Path, tmp_path: Path) -> None:
    (tmp_path / "secret.txt").write_text("secret\n")
    os.symlink(tmp_path / "secret.txt", workspace / "link.txt")
    with pytest.raises(ReplayError) as error:
        make(NEW)("Read", file_path="link.txt")
    assert error.value.kind is ErrorKind.EXECUTOR and error.value.before_effect


def test_paths_outside_the_workspace_are_refused_before_any_effect(
    make: Callable[[str], Run], workspace: Path, tmp_path: Path
) -> None:
    run = make(OLD)
    for name, arguments in (
        ("Read", {"file_path": "/etc/hostname"}),
        ("Read", {"file_path": "../outside.txt"}),
        ("Write", {"file_path": str(tmp_path / "new.txt"), "content": "x"}),
        ("Edit", {"file_path": "~/x.txt", "old_string": "", "new_string": "x"}),
    ):
        with pytest.raises(ReplayError) as error:
            run(name, **arguments)
        assert error.value.kind is ErrorKind.EXECUTOR and error.value.before_effect
    assert not (tmp_path / "new.txt").exists()


@BOTH
def test_read_returns_every_line_of_a_2001_line_file(make: Callable[[str], Run], workspace: Path, version: str) -> None:
    (workspace / "lines.txt").write_text("".join(f"line {i}\n" for i in range(1, 2002)))
    observation = make(version)("Read", file_path="lines.txt")
    assert not observation.truncated
    assert observation.content.endswith("2000\tline 2000\n2001\tline 2001\n2002\t")
    assert observation.native["file"]["numLines"] == 2002


@pytest.mark.parametrize(("version", "hint"), [(OLD, False), (NEW, True)])
def test_read_over_256_kib_needs_a_limit(
    make: Callable[[str], Run], workspace: Path, version: str, hint: bool
) -> None:
    (workspace / "big.txt").write_bytes(b"y" * 262_144 + b"\n")
    observation = make(version)("Read", file_path="big.txt", offset=2)
    assert observation.is_error
    assert observation.content.startswith("File content (256KB) exceeds maximum allowed size (256KB). Use offset")
    assert ("allow_large: true" in observation.content) is hint


def test_read_of_a_huge_file_keeps_the_scan_budget(make: Callable[[str], Run], workspace: Path) -> None:
    huge = workspace / "huge.txt"
    with huge.open("wb") as handle:
        handle.write(b"first\nsecond\n")
        handle.truncate(17 * 1024 * 1024)  # sparse: the rest is NUL bytes, one endless line
    run = make(NEW)
    head = run("Read", file_path="huge.txt", offset=1, limit=1)
    assert (head.content, head.truncated, head.is_error) == ("1\tfirst", False, False)
    for offset in (3, 1_000_000):
        past = run("Read", file_path="huge.txt", offset=offset, limit=5)
        assert (past.content, past.truncated, past.is_error) == (SCAN_NOTICE, True, False)
    assert run("Read", file_path="huge.txt").content.startswith("File content (17MB) exceeds maximum allowed size")


def test_read_output_budget(make: Callable[[str], Run], workspace: Path) -> None:
    (workspace / "wide.txt").write_bytes(b"x" * (5 * 1024 * 1024) + b"\n")
    observation = make(NEW)("Read", file_path="wide.txt", limit=1)
    assert observation.truncated and not observation.is_error
    assert observation.content.startswith("1\txxx") and observation.content.endswith("\n" + OUTPUT_NOTICE)
    assert len(observation.content.encode()) <= 4 * 1024 * 1024


@pytest.mark.parametrize(("version", "dedup"), [(OLD, True), (NEW, False)])
def test_repeated_read_of_an_unchanged_file(
    make: Callable[[str], Run], workspace: Path, version: str, dedup: bool
) -> None:
    run = make(version)
    (workspace / "f.txt").write_text("a\n")
    first = run("Read", file_path="f.txt")
    again = run("Read", file_path=str(workspace / "f.txt"), offset=1)
    if dedup:
        assert again.content == (
            "Wasted call — file unchanged since your last Read. Refer to that earlier tool_result instead."
        )
        assert again.native == {"type": "file_unchanged", "file": {"filePath": str(workspace / "f.txt")}}
    else:
        assert again.content == first.content
    assert run("Read", file_path="f.txt", limit=1).content == "1\ta"  # another range is read again


@pytest.mark.parametrize(
    ("version", "tail"),
    [(OLD, "Please use appropriate tools for binary file analysis."), (NEW, "script that can read the format.")],
)
def test_read_refuses_binary_extensions(make: Callable[[str], Run], workspace: Path, version: str, tail: str) -> None:
    (workspace / "data.bin").write_bytes(bytes(range(256)))
    observation = make(version)("Read", file_path="data.bin")
    assert observation.is_error
    assert observation.content.startswith(
        "<tool_use_error>This tool cannot read binary files. The file appears to be a binary .bin file."
    )
    assert observation.content.endswith(tail + "</tool_use_error>")


def test_read_text_decoding_per_version(make: Callable[[str], Run], workspace: Path) -> None:
    (workspace / "u16.txt").write_bytes("hi\n".encode("utf-16"))
    (workspace / "bad.txt").write_bytes(b"ok\xff\n")
    assert make(NEW)("Read", file_path="u16.txt").content == "1\thi\n2\t"
    assert make(OLD)("Read", file_path="u16.txt").content.startswith("1\t\ufffd\ufffdh\x00")
    invalid = make(NEW)("Read", file_path="bad.txt").content
    assert invalid.startswith("1\tok\ufffd\n2\t\n\n[This file is not valid UTF-8")
    assert make(OLD)("Read", file_path="bad.txt").content == "1\tok\ufffd\n2\t"


# ------------------------------------------------------------------------------------------------ Bash


@BOTH
def test_bash_output_text(make: Callable[[str], Run], version: str) -> None:
    run = make(version)
    merged = run("Bash", command="printf '\\n\\n  x  \\n'; echo err >&2; echo '  '")
    assert (merged.content, merged.is_error, merged.return_code) == ("  x  \nerr", False, 0)
    assert merged.native == {
        "stdout": "  x  \nerr", "stderr": "", "interrupted": False, "isImage": False, "noOutputExpected": False
    }
    assert run("Bash", command="true").content == "(Bash completed with no output)"
    assert run("Bash", command="mkdir -p d && cd d").native["noOutputExpected"] is True
    failed = run("Bash", command="printf '\\n\\nout\\n'; echo err >&2; exit 3")
    assert (failed.content, failed.is_error, failed.return_code) == ("Exit code 3\n\n\nout\nerr", True, 3)
    assert failed.native == "Error: Exit code 3\n\n\nout\nerr"
    assert run("Bash", command="false").content == "Exit code 1"
    assert run("Bash", command="nonexistent-cmd-xyz").content == (
        "Exit code 127\n/bin/bash: line 1: nonexistent-cmd-xyz: command not found"
    )
    multiline = run("Bash", command="echo one\nnonexistent-cmd-xyz").content  # bash counts eval lines like Claude's
    assert multiline.endswith("/bin/bash: line 3: nonexistent-cmd-xyz: command not found")
    assert run("Bash", command="echo $0; cat; echo \"[$1]\"").content == "/bin/bash\n[]"


def test_bash_shell_keeps_its_directory(make: Callable[[str], Run], workspace: Path) -> None:
    run = make(OLD)
    root = os.path.realpath(workspace)
    assert run("Bash", command="mkdir -p sub && cd sub && pwd").content == f"{root}/sub"
    assert run("Bash", command="pwd").content == f"{root}/sub"
    (workspace / "sub" / "inner.txt").write_text("inner\n")
    assert run("Read", file_path="inner.txt").content == "1\tinner\n2\t"  # relative to the shell's directory
    assert run("Bash", command="cd .. && mkdir -p q && cd q && false").content == "Exit code 1"
    assert run("Bash", command="pwd").content == f"{root}/sub"  # a failed command does not move the shell
    left = run("Bash", command="cd / && pwd")
    assert left.content == f"/\nShell cwd was reset to {root}"
    assert left.native["stderr"] == f"\nShell cwd was reset to {root}"
    assert run("Bash", command="pwd").content == root
    assert run("Bash", command="export FOO=1").content == "(Bash completed with no output)"
    assert run("Bash", command="echo FOO=$FOO").content == "FOO="  # only the directory persists


def _processes_with(marker: bytes) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker in cmdline:
                found.append(int(entry))
    return found


@BOTH
def test_bash_timeout_kills_the_command(make: Callable[[str], Run], version: str) -> None:
    started = time.monotonic()
    observation = make(version)("Bash", command="echo x; sleep 5", timeout=50)
    assert time.monotonic() - started < 2
    assert (observation.content, observation.is_error, observation.return_code) == (
        "Exit code 143\nCommand timed out after 0s\nx", True, 143
    )
    assert make(version)("Bash", command="sleep 3", timeout=1999).content == (
        "Exit code 143\nCommand timed out after 1s"
    )


def test_bash_leaves_no_process_behind(make: Callable[[str], Run]) -> None:
    run = make(OLD)
    background = run("Bash", command="sleep 30.0424 > /dev/null 2>&1 & echo bg")
    assert (background.content, background.is_error) == ("bg", False)
    timed_out = run("Bash", command="(sleep 30.0425 &); sleep 30", timeout=100)
    assert timed_out.is_error and timed_out.return_code == 143
    time.sleep(0.1)
    assert _processes_with(b"sleep\x0030.0424") == []
    assert _processes_with(b"sleep\x0030.0425") == []


def test_bash_environment(make: Callable[[str], Run], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FORKPOINT_TEST_API_KEY", "leak")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://forkpoint-own")
    out = make(NEW)("Bash", command="env | sort").content.splitlines()
    assert "CLAUDECODE=1" in out and "CLAUDE_CODE_ENTRYPOINT=sdk-cli" in out
    assert f"CLAUDE_CODE_SESSION_ID={SESSION}" in out and "AI_AGENT=claude-code_2-1-332_agent" in out
    assert f"HOME={tmp_path / 'home'}" in out
    assert not any(line.startswith(("FORKPOINT_TEST_API_KEY", "ANTHROPIC_")) for line in out)


@BOTH
def test_bash_large_output_is_persisted_like_claude(
    make: Callable[[str], Run], workspace: Path, tmp_path: Path, version: str
) -> None:
    observation = make(version)("Bash", command="seq 1 9000")
    expected_dir = tmp_path / "home" / ".claude" / "projects" / project_dir_name(workspace) / SESSION / "tool-results"
    path = Path(observation.native["persistedOutputPath"])
    assert path.parent == expected_dir and path.name[0] == "b" and len(path.stem) == 9
    full = "".join(f"{i}\n" for i in range(1, 9001))
    assert path.read_text() == full
    preview = full[:1999]
    assert observation.content == (
        f"<persisted-output>\nOutput too large (42.9KB). Full output saved to: {path}\n\n"
        f"Preview (first 2KB):\n{preview}\n...\n</persisted-output>"
    )
    assert observation.native["stdout"] == full[:30000] and observation.native["persistedOutputSize"] == 43893
    assert not observation.is_error
    exact = make(version)("Bash", command="head -c 30000 /dev/zero | tr '\\0' x")
    assert exact.content == "x" * 30000  # 30,000 bytes still inline


@pytest.mark.parametrize(("version", "cut_at"), [(OLD, 10001), (NEW, 11025)])
def test_bash_long_error_is_cut_per_version(make: Callable[[str], Run], version: str, cut_at: int) -> None:
    run = make(version)
    kept = run("Bash", command=f"head -c {cut_at - 1 - 12} /dev/zero | tr '\\0' x; exit 1")
    assert len(kept.content) == cut_at - 1
    cut = run("Bash", command=f"head -c {cut_at - 12} /dev/zero | tr '\\0' x; exit 1")
    marker = f"\n\n... [{cut_at - 10000} characters truncated] ...\n\n"
    assert cut.content == "Exit code 1\n" + "x" * 4988 + marker + "x" * 5000


# ------------------------------------------------------------------------------------------------ Write / Edit


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


@BOTH
def test_tools_these_versions_do_not_offer(make: Callable[[str], Run], version: str) -> None:
    run = make(version)
    glob = run("Glob", pattern="*.txt")
    assert glob.is_error and glob.content == (
        "<tool_use_error>Error: No such tool available: Glob. Glob is not available in this session — find files "
        "with `find` via the Bash tool instead.</tool_use_error>"
    )
    assert glob.native == "Error: No such tool available: Glob. Glob is not available in this session — find " \
        "files with `find` via the Bash tool instead."
    assert run("LS", path=".").content == "<tool_use_error>Error: No such tool available: LS</tool_use_error>"
    with pytest.raises(ReplayError) as error:
        run("NotebookEdit", notebook_path="nb.ipynb", new_source="x")
    assert error.value.kind is ErrorKind.UNSUPPORTED_VERSION and error.value.before_effect
