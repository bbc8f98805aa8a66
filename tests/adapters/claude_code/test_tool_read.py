"""Claude Code's Read (``tool_read``) through the executor: numbering, reminders, errors, budgets, per-version
decoding and "file unchanged" (as measured on the real 2.1.220 / 2.1.332 binaries)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from forkpoint.adapters.claude_code.tool_read import OUTPUT_NOTICE, SCAN_NOTICE
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import FreshObservation

OLD, NEW = "2.1.220", "2.1.332"
BOTH = pytest.mark.parametrize("version", [OLD, NEW])

Run = Callable[..., FreshObservation]  # the conftest's ``make(version)`` gives one


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


# --------------------------------------------------------------------------- paths outside the workspace (issue 29)

MISSING_21 = "File does not exist. Note: your current working directory is {cwd}."
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude_code"
WILD_2_0_26 = Path("/work/shared/wild-dev/claude-code/agentcmd-2.0.26.jsonl")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")


@BOTH
def test_read_outside_answers_missing_and_never_reads_the_host(make: Callable[[str], Run], workspace: Path,
                                                               tmp_path: Path, version: str) -> None:
    """--sandbox local: a path the host does not have gets Claude's missing-file text (a PNG too, and a path whose
    parent is a file); a host file outside the workspace is refused before any effect (stale fallback), its content
    in no answer, and so is a link outside that points back in."""
    run = make(version)
    canary = tmp_path / "canary.txt"
    canary.write_text("SECRET-CANARY\n")
    (tmp_path / "back").symlink_to(workspace)
    (workspace / "x.txt").write_text("inside\n")
    missing = MISSING_21.format(cwd=workspace)
    for path in (tmp_path / "absent" / "Screenshot 1.png", tmp_path / "nothing.txt", canary / "below.txt"):
        observation = run("Read", file_path=str(path))
        assert (observation.content, observation.is_error) == (missing, True), path
    trick = tmp_path / "x: No such file or directory"  # a name that spells the probe's "absent" text: exists
    trick.write_text("SECRET-CANARY\n")
    for path in (canary, tmp_path / "back" / "x.txt", tmp_path, trick):
        with pytest.raises(ReplayError) as caught:
            run("Read", file_path=str(path))
        assert caught.value.before_effect and caught.value.stale_fallback
        assert "outside the workspace" in caught.value.message and "SECRET" not in caught.value.message


@needs_bwrap
def test_read_outside_asks_the_sandbox_not_the_host(tmp_path: Path, session_id: str) -> None:
    """--sandbox bwrap: the host HAS the file (under the hidden temp dir), the sandbox does not: the answer is the
    sandbox's (missing), so nothing on the host side looked at the host file."""
    from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor
    from forkpoint.core.model import RunContext, ToolCall
    from forkpoint.sandbox import open_sandbox

    workspace = tmp_path / "ws"
    workspace.mkdir()
    host_file = tmp_path / "outside.png"
    host_file.write_bytes(b"\x89PNG\r\n\x1a\n")
    recorded = "/Users/alice/project"
    context = RunContext(workspace, tmp_path / "state", tmp_path / "out",
                         sandbox=open_sandbox("bwrap", workspace, recorded))
    executor = ClaudeToolExecutor(context, "2.0.27", session_id, tmp_path / "home" / ".claude")
    try:
        fresh = executor.run(ToolCall("toolu_1", "Read", {"file_path": str(host_file)}, None))
        assert (fresh.content, fresh.is_error) == ("<tool_use_error>File does not exist.</tool_use_error>", True)
        assert fresh.native == "Error: File does not exist."
        with pytest.raises(ReplayError) as caught:  # /usr/bin exists inside too: refused, not read
            executor.run(ToolCall("toolu_2", "Read", {"file_path": "/usr/bin/env"}, None))
        assert caught.value.stale_fallback
    finally:
        executor.close()


@needs_bwrap
@pytest.mark.parametrize("source", [FIXTURES / "2.0.27" / "read_outside" / "session.jsonl", WILD_2_0_26],
                         ids=["fixture-2.0.27", "wild-2.0.26"])
def test_a_boundary_after_a_read_outside_replays_without_stale(source: Path, tmp_path: Path) -> None:
    """The real 2.0.27's answers to missing paths outside its cwd are reproduced exactly; the public 2.0.26
    recording's Read of a macOS screenshot (batch 2) replays (differs: the file is not here) instead of stopping."""
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request

    if not source.is_file():
        pytest.skip(f"{source} is not on this machine")
    (tmp_path / "ws").mkdir()
    result = execute(build_request({
        "agent": "claude-code", "trajectory": str(source), "after_step": 3, "replay_only": True,
        "workspace": str(tmp_path / "ws"), "sandbox": "bwrap", "state_dir": str(tmp_path / "state"),
        "output_dir": str(tmp_path / "out"), "run_id": "r", "on_divergence": "ignore"}, source="test")).to_json()
    assert result["failure"] is None, result["failure"]
    assert "stale_observations" not in result["quality_reasons"]
    if source != WILD_2_0_26:
        assert result["observations_match"] == "exact"
