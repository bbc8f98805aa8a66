"""ClaudeToolExecutor: Claude Code's tool semantics and texts (as measured on the real 2.1.220 / 2.1.332 binaries):
volatile output, versions, Bash and the tools these versions do not offer (Read: test_tool_read.py; Write and Edit:
test_tool_edit.py)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.claude_code.jstext import format_file_size, js_len, js_slice, js_trim
from forkpoint.adapters.claude_code.launch import project_dir_name
from forkpoint.adapters.claude_code.tool_profile import V2_0, V2_0_EARLY, profile_for_version
from forkpoint.adapters.claude_code.tools import (
    PERSISTED_PATH_PLACEHOLDER,
    normalize_volatile,
)
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import FreshObservation

OLD, NEW = "2.1.220", "2.1.332"
BOTH = pytest.mark.parametrize("version", [OLD, NEW])

Run = Callable[..., FreshObservation]  # the conftest's ``make(version)`` gives one


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


@pytest.mark.parametrize("version", ["0.2.125", "2.1.100", "3.0.0"])
def test_unverified_versions_are_refused(version: str) -> None:
    with pytest.raises(ReplayError) as error:
        profile_for_version(version)
    assert error.value.kind is ErrorKind.UNSUPPORTED_VERSION


def test_old_lines_have_their_measured_profiles() -> None:
    assert profile_for_version("1.0.128") is V2_0_EARLY  # measured: 2.0.27's texts with the older Read reminder
    assert profile_for_version("1.0.98") is V2_0_EARLY  # the 1.0.x line, measured on its newest release
    assert profile_for_version("2.0.27") is V2_0  # the measured 2.0.x line
    assert profile_for_version("2.0.14") is V2_0_EARLY  # its older Read reminder (public 2.0.14 recordings)
    assert profile_for_version("2.1.250").version == OLD
    assert profile_for_version("2.1.400").version == NEW



@pytest.mark.parametrize(("recorded", "note"), [("2.1.92", True), ("2.1.93", True), ("2.1.94", False),
                                                ("2.1.108", False), ("2.1.120", False), ("2.1.126", False),
                                                ("2.1.128", True), ("2.1.220", True), (None, True)])
def test_2_1_94_to_126_recordings_re_run_without_the_context_note(recorded: str | None, note: bool) -> None:
    """The measured range (calibrated: 2.1.94-2.1.126 differ only there, 2.1.92 resumes differently, 2.1.128 has
    the note) and nothing else: the rest of 2.1.220's tools, and not an old line (``is_v2_0``: 2.0.x)."""
    from dataclasses import replace

    from forkpoint.adapters.claude_code.tool_profile import NO_CONTEXT_NOTE, is_v2_0, tool_profile
    from forkpoint.adapters.claude_code.tool_profile import OLD as OLD_PROFILE

    profile = tool_profile("2.1.220", recorded)
    assert profile.context_note is note and profile.write_user_modified is note
    assert profile is (OLD_PROFILE if note else NO_CONTEXT_NOTE)
    assert replace(profile, context_note=True, write_user_modified=True, label="") == replace(OLD_PROFILE, label="")
    assert not is_v2_0(recorded)


def test_a_2_1_108_recording_names_its_tool_profile() -> None:
    from forkpoint.adapters import get_adapter
    from forkpoint.adapters.claude_code.parse import parse_session
    from forkpoint.adapters.claude_code.tool_profile import NO_CONTEXT_NOTE

    session = Path(__file__).parents[2] / "fixtures" / "claude_code" / "2.1.108" / "no_context_note" / "session.jsonl"
    facts = get_adapter("claude-code").version_facts(parse_session(session))
    assert facts.tool_version == "2.1.220" and facts.tool_profile == NO_CONTEXT_NOTE.label
    assert "2.1.94-2.1.126" in NO_CONTEXT_NOTE.label and any(NO_CONTEXT_NOTE.label in r for r in facts.reasons)
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


def test_bash_environment(
    make: Callable[[str], Run], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, session_id: str
) -> None:
    monkeypatch.setenv("FORKPOINT_TEST_API_KEY", "leak")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://forkpoint-own")
    out = make(NEW)("Bash", command="env | sort").content.splitlines()
    assert "CLAUDECODE=1" in out and "CLAUDE_CODE_ENTRYPOINT=sdk-cli" in out
    assert f"CLAUDE_CODE_SESSION_ID={session_id}" in out and "AI_AGENT=claude-code_2-1-332_agent" in out
    assert f"HOME={tmp_path / 'home'}" in out
    assert not any(line.startswith(("FORKPOINT_TEST_API_KEY", "ANTHROPIC_")) for line in out)


@BOTH
def test_bash_large_output_is_persisted_like_claude(
    make: Callable[[str], Run], workspace: Path, tmp_path: Path, version: str, session_id: str
) -> None:
    observation = make(version)("Bash", command="seq 1 9000")
    projects = tmp_path / "home" / ".claude" / "projects"
    expected_dir = projects / project_dir_name(workspace) / session_id / "tool-results"
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
        run("WebFetch", url="https://example.com", prompt="x")
    assert error.value.kind is ErrorKind.UNSUPPORTED_VERSION and error.value.before_effect


@pytest.mark.parametrize("count", [12000, 300000])
def test_v2_0_bash_keeps_30000_units_and_counts_the_lines_cut(make: Any, count: int) -> None:
    """2.0.27 (calibration probe, `seq 1 12000`): no persisted output; the first 30,000 units, then
    ``\\n\\n... [5779 lines truncated] ...``. 300,000 lines: the count also covers the log past forkpoint's 1 MiB
    head."""
    run = make("2.0.27")
    fresh = run("Bash", command=f"seq 1 {count}")
    full = "\n".join(str(n) for n in range(1, count + 1))
    expected = f"{full[:30000]}\n\n... [{len(full[30000:].split(chr(10)))} lines truncated] ..."
    assert fresh.content == expected and not fresh.is_error
    if count == 12000:
        assert fresh.content.endswith("... [5779 lines truncated] ...")
    failed = run("Bash", command="echo; ls missing-dir")
    assert failed.is_error and failed.content == "ls: cannot access 'missing-dir': No such file or directory"
