"""CodexToolExecutor: every expected text below was produced by the REAL Codex 0.149.0 / 0.171.0 binaries.

They were recorded as probe rollouts (scripted model, ``scripts/record_codex_fixtures.py``'s harness, cwd
``/tmp/forkpoint-probe-codex/<probe>``) covering truncation, yield timeouts, background processes, argument
errors, the ``rm -f`` refusal, shell selection, ``tty``, ``shell_command`` and ~70 apply_patch shapes; the texts
are pinned here. Paths in Codex's messages are absolute, so tests that compare them run in the workspace
``/tmp/forkpoint-probe-codex/<name>`` like the probes did.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.codex import tool_args
from forkpoint.adapters.codex.tool_policy import is_rm_force, script_commands
from forkpoint.adapters.codex.tool_text import rust_debug, shlex_join, shlex_quote, truncate_middle
from forkpoint.adapters.codex.tools import (
    CHUNK_ID_PLACEHOLDER,
    DURATION_PLACEHOLDER,
    SESSION_ID_PLACEHOLDER,
    WALL_TIME_PLACEHOLDER,
    CodexToolExecutor,
    normalize_volatile,
)
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import FreshObservation, RunContext, ToolCall

VERSIONS = ("0.149.0", "0.171.0")
PROBE_ROOT = Path("/tmp/forkpoint-probe-codex")
HEADER = f"Chunk ID: {CHUNK_ID_PLACEHOLDER}\nWall time: {WALL_TIME_PLACEHOLDER} seconds\n"


def exited(code: int, tokens: int, output: str) -> str:
    """A normalised exec_command output of a finished command."""
    return f"{HEADER}Process exited with code {code}\nOriginal token count: {tokens}\nOutput:\n{output}"


class Session:
    """An executor over a workspace, with helpers to make calls the way the rollout parser does."""

    def __init__(self, workspace: Path, version: str, state: Path, session_id: str = "thread-1") -> None:
        self.workspace = workspace
        self.version = version
        self.context = RunContext(workspace, state / "state", state / "out", session_id)
        self.executor = CodexToolExecutor(self.context, version)
        self.count = 0

    def call(self, name: str, arguments: dict[str, Any]) -> FreshObservation:
        self.count += 1
        return self.executor.run(ToolCall(f"call_{self.count}", name, arguments, None))

    def exec(self, cmd: str, **extra: Any) -> str:
        content = self.call("exec_command", {"cmd": cmd, **extra}).content
        assert isinstance(content, str)
        return str(normalize_volatile(content))

    def patch(self, text: str) -> str:
        content = self.call("apply_patch", {"input": text}).content
        assert isinstance(content, str)
        return str(normalize_volatile(content))


@pytest.fixture(params=VERSIONS)
def version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def session(tmp_path: Path, version: str) -> Iterator[Session]:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("hello from notes\nsecond line\n")
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("print('hi')\n")
    current = Session(workspace, version, tmp_path)
    yield current
    current.executor.close()


@pytest.fixture
def probe_session(tmp_path: Path, version: str, request: pytest.FixtureRequest) -> Iterator[Session]:
    """A workspace at the probes' absolute path (Codex's messages name absolute paths)."""
    workspace = PROBE_ROOT / f"unit-{request.node.name.split('[')[0]}-{version}-{os.getpid()}"
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.mkdir(parents=True)
    current = Session(workspace, version, tmp_path)
    yield current
    current.executor.close()
    shutil.rmtree(workspace, ignore_errors=True)
    with contextlib.suppress(OSError):  # another process's probe workspace is still in it
        PROBE_ROOT.rmdir()


# ----------------------------------------------------------------------------------------- normalize_volatile


def test_normalize_volatile_masks_only_random_and_measured_header_fields() -> None:
    fresh = (
        "Chunk ID: 3aefec\nWall time: 0.8547 seconds\nProcess exited with code 0\nOriginal token count: 2\nOutput:\n"
    )
    other = (
        "Chunk ID: 026133\nWall time: 0.0000 seconds\nProcess exited with code 0\nOriginal token count: 2\nOutput:\n"
    )
    assert normalize_volatile(fresh) == normalize_volatile(other) == exited(0, 2, "")
    # the exit code, token count and output are not volatile
    assert normalize_volatile(fresh.replace("code 0", "code 1")) != normalize_volatile(other)
    assert normalize_volatile(fresh + "a") != normalize_volatile(other + "b")
    # a command printing a Codex-like header is left alone
    body = "Chunk ID: abcdef\nWall time: 1.0 seconds\n"
    assert normalize_volatile(fresh + body).endswith("Output:\n" + body)


def test_normalize_volatile_running_session_legacy_and_patch_outputs() -> None:
    running = (
        "Chunk ID: a1b2c3\nWall time: 0.5020 seconds\nProcess running with session ID 87580\n"
        "Original token count: 0\nOutput:\n"
    )
    assert normalize_volatile(running) == (
        f"{HEADER}Process running with session ID {SESSION_ID_PLACEHOLDER}\nOriginal token count: 0\nOutput:\n"
    )
    legacy = "Exit code: 124\nWall time: 1 seconds\nOutput:\ncommand timed out after 1005 milliseconds\na\n"
    assert normalize_volatile(legacy) == normalize_volatile(legacy.replace("1005", "1004").replace("1 sec", "1.2 sec"))
    patch = "Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated the following files:\nA hello.txt\n"
    assert normalize_volatile(patch) == patch.replace("Wall time: 0", f"Wall time: {WALL_TIME_PLACEHOLDER}")
    for unchanged in ("Plan updated", "unsupported call: shell", "apply_patch verification failed: x", None, [1]):
        assert normalize_volatile(unchanged) == unchanged


# ----------------------------------------------------------------------------------------- exec_command


def test_exec_command_basic_outputs(session: Session) -> None:
    assert session.exec("ls") == exited(0, 4, "notes.txt\nsrc\n")
    assert session.exec("cat notes.txt") == exited(0, 8, "hello from notes\nsecond line\n")
    assert session.exec("ls missing-dir") == exited(
        2, 15, "ls: cannot access 'missing-dir': No such file or directory\n"
    )
    assert session.exec("exit 3") == exited(3, 0, "")
    assert session.exec("exit 300") == exited(44, 0, "")
    assert session.exec("kill -TERM $$") == exited(143, 0, "")
    assert session.exec("printf 'no newline'") == exited(0, 3, "no newline")
    assert session.exec("printf '\\xff\\xfe bad utf8\\n'") == exited(0, 3, "\ufffd\ufffd bad utf8\n")
    assert session.exec("cat") == exited(0, 0, "")  # stdin is /dev/null
    assert session.exec("echo out; echo err >&2") == exited(0, 2, "out\nerr\n")
    # each call is a fresh process: cd does not persist; workdir is relative to the session cwd
    assert session.exec("cd src && pwd") == exited(
        0, approx(f"{session.workspace}/src\n"), f"{session.workspace}/src\n"
    )
    assert session.exec("pwd") == exited(0, approx(f"{session.workspace}\n"), f"{session.workspace}\n")
    assert session.exec("pwd", workdir="src") == session.exec("pwd", workdir=str(session.workspace / "src"))


def approx(text: str) -> int:
    return (len(text.encode()) + 3) // 4


def test_exec_command_runs_like_codex(session: Session) -> None:
    # a NON-login `/bin/bash -c` (Codex sources its login snapshot, then execs), with Codex's variables
    expected = "/bin/bash\nlogin_shell    \toff\ndumb 1 cat 1\n"
    assert session.exec("echo $0; shopt login_shell; echo $TERM $NO_COLOR $PAGER $CODEX_CI") == exited(
        0, approx(expected), expected
    )
    assert session.exec("echo $0", shell="sh").split("Output:\n")[1].endswith("sh\n")
    assert session.exec("echo $0", shell="/usr/bin/bash").endswith("Output:\n/bin/bash\n")
    assert session.exec("echo $0", shell="python3").endswith("Output:\n/bin/sh\n")
    ids = session.exec("echo $HOME; echo $CODEX_HOME; echo $CODEX_THREAD_ID; echo $CODEX_TOOL_CALL_ID $CODEX_VERSION")
    home = session.context.home
    per_call = f"call_{session.count} {session.version}" if session.version == "0.171.0" else ""
    assert ids.split("Output:\n")[1] == f"{home}\n{home}/.codex\nthread-1\n{per_call}\n"


def test_exec_command_truncation_matches_codex(session: Session) -> None:
    out = session.exec("seq 1 3000", max_output_tokens=100)
    head = "".join(f"{n}\n" for n in range(1, 70)) + "70"
    tail = "".join(f"{n}\n" for n in range(2961, 3001))
    assert out == exited(
        0,
        3474,
        "Warning: truncated output (original token count: 3474)\nTotal output lines: 3000\n\n"
        f"{head}…3374 tokens truncated…{tail}",
    )
    assert session.exec("seq 1 30", max_output_tokens=0) == exited(
        0, 21, "Warning: truncated output (original token count: 21)\nTotal output lines: 30\n\n…21 tokens truncated…"
    )
    unicode = session.exec("for i in $(seq 1 2000); do printf 'é日本%05d\\n' $i; done", max_output_tokens=50)
    assert unicode.endswith(
        "Total output lines: 2000\n\n"
        + "".join(f"é日本{n:05d}\n" for n in range(1, 8))
        + "é…6950 tokens truncated…3\n"
        + "".join(f"é日本{n:05d}\n" for n in range(1994, 2001))
    )
    assert "Original token count: 750\n" in session.exec("yes 'x y z' | head -c 3000", max_output_tokens=7)
    # 10,000 tokens is also the cap; exactly 40,000 bytes is not truncated, 40,001 is
    assert "…974 tokens truncated…" in session.exec("seq 1 9000", max_output_tokens=20_000)
    assert "Warning" not in session.exec("head -c 40000 /dev/zero | tr '\\0' c")
    assert "…1 tokens truncated…" in session.exec("head -c 40001 /dev/zero | tr '\\0' b")


def test_exec_command_keeps_first_and_last_512_kib_like_codex(session: Session) -> None:
    out = session.exec("head -c 1048577 /dev/zero | tr '\\0' q")
    assert out.startswith(
        f"{HEADER}Process exited with code 0\nOriginal token count: 262145\nOutput:\n"
        "Warning: truncated output (original token count: 262145)\n... 1 bytes omitted ...\n\n"
    )
    assert "…252151 tokens truncated…" in out


def _running(command: str) -> bool:
    """Whether a live process of this test's session runs the shell ``command`` (its whole text is one argument)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if command.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                    return True
            except OSError:
                continue
    return False


def test_exec_command_yield_time_reports_a_running_process_and_kills_it(session: Session) -> None:
    started = time.monotonic()
    command = f"echo first; sleep 3; touch late-marker  # {session.workspace}"  # this test's own command line
    out = session.exec(command, yield_time_ms=300)
    assert time.monotonic() - started < 2.5
    assert out == (
        f"{HEADER}Process running with session ID {SESSION_ID_PLACEHOLDER}\nOriginal token count: 2\nOutput:\nfirst\n"
    )
    # killed: no process of the command is left (the shell that would touch the marker included), and no marker
    deadline = time.monotonic() + 10
    while _running(command) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(command), "the timed-out command kept running"
    assert not (session.workspace / "late-marker").exists(), "the timed-out command kept running"
    # the yield time is clamped to 250 ms .. 30 s
    assert session.exec("ls", yield_time_ms=10) == exited(0, 4, "notes.txt\nsrc\n")


def test_exec_command_background_process_is_not_left_behind(session: Session) -> None:
    out = session.exec("sleep 30 & echo $! > bg.pid; echo started")
    assert out == exited(0, 2, "started\n")
    pid = int((session.workspace / "bg.pid").read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                state = handle.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"background sleep {pid} is still running")


def test_exec_command_tty_uses_a_terminal(session: Session) -> None:
    assert session.exec("printf 'a\\nb'", tty=True) == exited(0, 1, "a\r\nb")
    out = session.exec("echo hi; echo err >&2; tty; stty size", tty=True)
    assert out.split("Output:\n")[1].startswith("hi\r\nerr\r\n/dev/pts/")
    assert out.endswith("24 80\r\n")
    waiting = session.exec("cat", tty=True, yield_time_ms=300)  # nobody types: still running at the yield
    assert f"Process running with session ID {SESSION_ID_PLACEHOLDER}\n" in waiting


def test_exec_command_rm_force_is_refused_before_running(session: Session) -> None:
    (session.workspace / "build").mkdir()
    out = session.exec("rm -rf build")
    reason = "`/bin/bash -lc 'rm -rf build'` rejected: rm -f style commands are not permitted. Use a safer approach"
    message = f'CreateProcess {{ message: "Rejected(\\"{reason}\\")" }}'
    if session.version == "0.149.0":
        assert out == f"exec_command failed for `/bin/bash -lc 'rm -rf build'`: {message}"
    else:
        assert out == f"exec_command failed: {message}"
    assert (session.workspace / "build").is_dir()
    quoted = session.exec('rm -rf "it\'s here"')
    assert quoted.endswith(
        'CreateProcess { message: "Rejected(\\"`/bin/bash -lc \\\\\\"rm -rf \\\\\\\\\\\\\\"it\'s here\\\\\\\\\\\\\\"'
        '\\\\\\"` rejected: rm -f style commands are not permitted. Use a safer approach\\")" }'
    )
    assert session.exec("rm -r build") == exited(0, 0, "")  # no force flag: it runs


def test_exec_command_argument_and_workdir_errors(probe_session: Session) -> None:
    def raw(arguments: str) -> str:
        call = ToolCall("c", "exec_command", json.loads(arguments), None)
        executor = probe_session.executor
        executor._lines = {}  # no rollout: the arguments are re-serialised with json.dumps
        content = executor.run(call).content
        assert isinstance(content, str)
        return content

    assert raw('{"command": "ls"}') == "failed to parse function arguments: missing field `cmd` at line 1 column 17"
    assert raw('{"cmd": "ls", "tty": "yes"}') == (
        'failed to parse function arguments: invalid type: string "yes", expected a boolean at line 1 column 26'
    )
    ws = probe_session.workspace
    missing = probe_session.exec("pwd", workdir="nope")
    reason = 'Rejected(\\"Failed to create unified exec process: No such file or directory (os error 2)\\")'
    prefix = (
        "exec_command failed for `/bin/bash -lc pwd`: "
        if probe_session.version == "0.149.0"
        else ("exec_command failed: ")
    )
    assert missing == f'{prefix}CreateProcess {{ message: "{reason}" }}'
    with pytest.raises(ReplayError) as refused:
        probe_session.exec("touch escaped", workdir="..")
    assert refused.value.before_effect and not (ws.parent / "escaped").exists()


def test_tool_args_reproduce_serde_errors() -> None:
    expected = {
        ('{"command": "ls"}', "EXEC_COMMAND"): "missing field `cmd` at line 1 column 17",
        ('{"cmd":5}', "EXEC_COMMAND"): "invalid type: integer `5`, expected a string at line 1 column 8",
        ('{"cmd": "ls", "yield_time_ms": "x"}', "EXEC_COMMAND"): (
            'invalid type: string "x", expected u64 at line 1 column 34'
        ),
        ('{"cmd": "ls", "max_output_tokens": -1}', "EXEC_COMMAND"): (
            "invalid value: integer `-1`, expected usize at line 1 column 37"
        ),
        ("{}", "EXEC_COMMAND"): "missing field `cmd` at line 1 column 2",
        ('{"explanation": "x"}', "UPDATE_PLAN"): "missing field `plan` at line 1 column 20",
        ('{"plan": [{"step": "a"}]}', "UPDATE_PLAN"): "missing field `status` at line 1 column 23",
        ('{"plan": [{"step": "a", "status": "weird"}]}', "UPDATE_PLAN"): (
            "unknown variant `weird`, expected one of `pending`, `in_progress`, `completed` at line 1 column 41"
        ),
        ('{"cmd": "ls"}', "SHELL_COMMAND"): "missing field `command` at line 1 column 13",
    }
    for (raw, spec), message in expected.items():
        assert tool_args.check(raw, getattr(tool_args, spec)) == tool_args.PREFIX + message
    for raw in ('{"cmd": "echo hi", "unknown_field": 1}', '{"cmd": "ls", "workdir": null}'):
        assert tool_args.check(raw, tool_args.EXEC_COMMAND) is None


#: (command, refused by Codex 0.149.0 and 0.171.0) — every pair was probed on the real binaries.
RM_PROBES = [
    ("rm -rf build", True), ("rm -f x.txt", True), ("echo a && rm -rf x", True), ("rm -r dir", False),
    ("rm notes.txt.bak", False), ("git clean -fdx", False), ("find . -name '*.pyc' -delete", False),
    ("rm -f x > /dev/null", True), ("FOO=1 rm -rf x", True), ("rm -rf $HOME/nothing-here", True),
    ("rm -rf x # comment", True), ("sudo rm -rf x", True), ("/bin/rm -rf x", True), ("rm -r -f x; echo ok1", True),
    ("rm -fr x", True), ("rm --force x", True), ("(rm -rf x)", True), ("if true; then rm -rf x; fi", True),
    ("echo a\nrm -rf x", True), ("echo $(rm -rf x)", True), ("cat <<EOF\nhi\nEOF\nrm -rf x", True),
    ("rm -rf x <<EOF\nhi\nEOF", True), ("rm -f", True), ("echo rm -rf x", False), ("echo 'rm -rf x'", False),
    ("git rm -f x", False), ("rm zz2 -f", True), ("rm -- -f", False), ("xargs rm -f < /dev/null", False),
    ("find . -exec rm -f {} \\;", False), ("sh -c 'rm -rf zz5'", True), ('bash -c "rm -rf zz6"', True),
    ("RM=rm; $RM -rf zz7", False), ("command rm -f zz8", False), ("env rm -f zz9", True), ("nice rm -f x", False),
    ("\\rm -f zz12", False), ('"rm" -f zz13', True), ("f() { rm -f zz17; }", True), ("# rm -rf x", False),
    ("cat <<EOF\nrm -rf x\nEOF", False), ("rm -rf x (", False), ("sudo -u root rm -f zz18", False),
    ("rm -f$(echo) zz21", False), ("rm '-f' zz22", True), ("/usr/bin/env rm -f zz24", True), ("exec rm -f z", False),
    ("time rm -f zz26", False), ("! rm -f zz27", True), ("for f in a; do rm -f \"$f\"; done", True),
    ("cat <(rm -f zz11)", True), ("function g { rm -f zz23; }", True), ("rm -f{,} zz33", False),
    ("case x in x) rm -f zz1;; esac", True), ("dash -c 'rm -f zz29'", False), ("bash -c 'rm -f z' extra", False),
]  # fmt: skip


def test_rm_force_detection_matches_the_probes() -> None:
    for command, refused in RM_PROBES:
        assert is_rm_force(["/bin/bash", "-lc", command]) is refused, command
    assert script_commands("ls && pwd; echo 'hi there' | wc -l") == [
        ["ls"],
        ["pwd"],
        ["echo", "hi there"],
        ["wc", "-l"],
    ]
    assert script_commands("echo 'unterminated") is None


def test_shlex_and_rust_debug_like_codex() -> None:
    assert shlex_join(["/bin/bash", "-lc", "pwd"]) == "/bin/bash -lc pwd"
    assert shlex_join(["/bin/bash", "-lc", "rm -rf build"]) == "/bin/bash -lc 'rm -rf build'"
    assert shlex_quote('rm -rf "it\'s here"') == '"rm -rf \\"it\'s here\\""'
    assert shlex_quote("") == "''"
    assert rust_debug('a"b\\c\nd\te\x01') == '"a\\"b\\\\c\\nd\\te\\u{1}"'
    assert truncate_middle("abcdef", 1) == "ab…1 tokens truncated…ef"


# ----------------------------------------------------------------------------------------- other tools


def test_shell_command_update_plan_and_unknown_tools(session: Session) -> None:
    legacy = session.call("shell_command", {"command": "echo out; echo err >&2; exit 3"}).content
    plan = {"explanation": "x", "plan": [{"step": "a", "status": "completed"}]}
    if session.version == "0.149.0":
        assert (
            normalize_volatile(legacy)
            == f"Exit code: 3\nWall time: {WALL_TIME_PLACEHOLDER} seconds\nOutput:\nout\nerr\n"
        )
        timed = session.call("shell_command", {"command": "echo a; sleep 3; echo b", "timeout_ms": 500}).content
        assert str(normalize_volatile(timed)).endswith("Output:\ncommand timed out after <duration> milliseconds\na\n")
        assert str(timed).startswith("Exit code: 124\n")
        assert session.call("update_plan", plan).content == "Plan updated"
    else:
        assert legacy == "unsupported call: shell_command"
        assert session.call("update_plan", plan).content == "unsupported call: update_plan"
    assert session.call("shell", {"command": ["ls"]}).content == "unsupported call: shell"
    assert session.call("foo_bar", {"x": 1}).content == "unsupported call: foo_bar"
    # no process session was started in this replay: Codex's own answer (measured, fixture unified_exec)
    unknown = session.call("write_stdin", {"session_id": 1, "chars": ""}).content
    assert unknown == "write_stdin failed: Unknown process id 1"
    for name in ("web_search",):
        with pytest.raises(ReplayError) as error:
            session.call(name, {"session_id": 1, "chars": ""})
        assert error.value.before_effect


def test_unknown_version_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ReplayError) as error:
        CodexToolExecutor(RunContext(tmp_path, tmp_path / "s", tmp_path / "o"), "0.150.0")
    assert error.value.kind is ErrorKind.UNSUPPORTED_VERSION


# ----------------------------------------------------------------------------------------- apply_patch

OK = f"Exit code: 0\nWall time: {WALL_TIME_PLACEHOLDER} seconds\nOutput:\nSuccess. Updated the following files:\n"


def patch(body: str) -> str:
    return f"*** Begin Patch\n{body}*** End Patch\n"


def test_apply_patch_add_update_delete_move(session: Session) -> None:
    ws = session.workspace
    assert session.patch(patch("*** Add File: hello.txt\n+hello from the patch\n")) == OK + "A hello.txt\n"
    assert (ws / "hello.txt").read_text() == "hello from the patch\n"
    assert session.patch(patch("*** Update File: notes.txt\n@@\n hello from notes\n-second line\n+2nd\n")) == (
        OK + "M notes.txt\n"
    )
    assert (ws / "notes.txt").read_text() == "hello from notes\n2nd\n"
    assert session.patch(patch("*** Update File: src/app.py\n*** Move to: lib/app.py\n@@\n-print('hi')\n+x\n")) == (
        OK + "M lib/app.py\n"
    )
    assert (ws / "lib" / "app.py").read_text() == "x\n" and not (ws / "src" / "app.py").exists()
    summary = patch("*** Add File: z.txt\n+z\n*** Delete File: hello.txt\n*** Update File: notes.txt\n-2nd\n+two\n")
    assert session.patch(summary) == OK + "A z.txt\nM notes.txt\nD hello.txt\n"
    assert not (ws / "hello.txt").exists()
    # the function form (older Codex tool shape) applies the same way, with "input" or "patch"
    function_form = session.call("apply_patch", {"patch": patch("*** Add File: f.txt\n+f\n")}).content
    assert normalize_volatile(function_form) == OK + "A f.txt\n"
    assert (ws / "f.txt").read_text() == "f\n"


def test_apply_patch_failures_change_nothing(probe_session: Session) -> None:
    ws = probe_session.workspace
    (ws / "b.txt").write_text("one\ntwo\n")
    fail = "apply_patch verification failed: "
    assert probe_session.patch(patch("*** Update File: b.txt\n@@\n-not there\n+x\n")) == (
        f"{fail}Failed to find expected lines in {ws}/b.txt:\nnot there"
    )
    assert probe_session.patch(patch("*** Add File: new.txt\n+1\n*** Update File: missing.txt\n@@\n-a\n+b\n")) == (
        f"{fail}Failed to read file to update {ws}/missing.txt: No such file or directory (os error 2)"
    )
    assert not (ws / "new.txt").exists()
    assert probe_session.patch(patch("*** Delete File: gone.txt\n")) == (
        f"{fail}Failed to read {ws}/gone.txt: No such file or directory (os error 2)"
    )
    (ws / "dir").mkdir()
    assert (
        probe_session.patch(patch("*** Delete File: dir\n"))
        == f"{fail}Failed to read {ws}/dir: path `{ws}/dir` is not a file"
    )
    assert probe_session.patch("garbage\n*** End Patch\n") == (
        f"{fail}invalid patch: The first line of the patch must be '*** Begin Patch'"
    )
    assert probe_session.patch(patch("*** Frobnicate File: x\n")) == (
        f"{fail}invalid hunk at line 2, '*** Frobnicate File: x' is not a valid hunk header. Valid hunk headers: "
        "'*** Add File: {path}', '*** Delete File: {path}', '*** Update File: {path}'"
    )
    assert probe_session.patch(patch("*** Update File: b.txt\n")) == (
        f"{fail}invalid hunk at line 2, Update file hunk for path 'b.txt' is empty"
    )
    assert probe_session.patch(patch("*** Update File: b.txt\n@@ nowhere\n-one\n+1\n")) == (
        f"{fail}Failed to find context 'nowhere' in {ws}/b.txt"
    )
    assert probe_session.patch(patch("*** Add File: s.txt\n+1\n*** Delete File: s.txt\n")) == (
        f"{fail}invalid patch: multiple operations target {ws}/s.txt"
    )
    assert probe_session.patch("*** Begin Patch\n*** End Patch\n") == "patch rejected: empty patch"
    (ws / "file").write_text("x\n")
    assert probe_session.patch(patch("*** Add File: file/sub.txt\n+x\n")) == (
        f"Exit code: 1\nWall time: {WALL_TIME_PLACEHOLDER} seconds\nOutput:\nFailed to write file {ws}/file/sub.txt\n"
    )
    assert (ws / "b.txt").read_text() == "one\ntwo\n"


def test_apply_patch_matching_and_line_endings(session: Session) -> None:
    ws = session.workspace
    (ws / "ws.txt").write_text("alpha   \nbeta\n")
    (ws / "uni.txt").write_text("He said \u201chello\u201d \u2014 ok\n")
    (ws / "crlf.txt").write_bytes(b"line1\r\nline2\r\nline3\r\n")
    (ws / "trail.txt").write_text("a\nb\n\n\n")
    (ws / "nonl.txt").write_text("no newline at end")
    session.patch(patch("*** Update File: ws.txt\n@@\n-alpha\n+ALPHA\n beta\n"))
    session.patch(patch('*** Update File: uni.txt\n@@\n-He said "hello" - ok\n+He said hi\n'))
    session.patch(patch("*** Update File: crlf.txt\n@@\n line1\n-line2\n+LINE2\n line3\n"))
    session.patch(patch("*** Update File: trail.txt\n@@\n b\n+c\n"))
    session.patch(patch("*** Update File: nonl.txt\n@@\n-no newline at end\n+changed\n*** End of File\n"))
    assert (ws / "ws.txt").read_text() == "ALPHA\nbeta\n"
    assert (ws / "uni.txt").read_text() == "He said hi\n"
    assert (ws / "nonl.txt").read_text() == "changed\n"
    if session.version == "0.149.0":
        assert (ws / "crlf.txt").read_bytes() == b"line1\nLINE2\nline3\n"
        assert (ws / "trail.txt").read_text() == "a\nb\nc\n\n"
    else:  # 0.171 keeps each line's ending and every trailing empty line
        assert (ws / "crlf.txt").read_bytes() == b"line1\r\nLINE2\r\nline3\r\n"
        assert (ws / "trail.txt").read_text() == "a\nb\nc\n\n\n"
    heredoc = "<<'EOF'\n*** Begin Patch\n*** Add File: heredoc.txt\n+hd\n*** End Patch\nEOF\n"
    assert session.patch(heredoc) == OK + "A heredoc.txt\n"


def test_apply_patch_outside_the_workspace_is_refused_before_any_effect(session: Session, tmp_path: Path) -> None:
    ws = session.workspace
    outside = tmp_path / "outside.txt"
    text = patch(f"*** Add File: inside.txt\n+in\n*** Add File: {outside}\n+out\n")
    with pytest.raises(ReplayError) as error:
        session.patch(text)
    assert error.value.before_effect
    assert not outside.exists() and not (ws / "inside.txt").exists()
    with pytest.raises(ReplayError):
        session.patch(patch("*** Update File: notes.txt\n*** Move to: ../moved.txt\n@@\n-second line\n+x\n"))
    assert (ws / "notes.txt").read_text() == "hello from notes\nsecond line\n"
    secret = tmp_path / "secret.txt"
    secret.write_text("secret\n")
    (ws / "link.txt").symlink_to(secret)
    with pytest.raises(ReplayError) as escaped:
        session.patch(patch("*** Update File: link.txt\n@@\n-secret\n+leaked\n"))
    assert escaped.value.before_effect and secret.read_text() == "secret\n"


def _node_value(node: tool_args.Node) -> Any:
    if node.kind == "object":
        return {key: _node_value(value) for key, value in node.members}
    if node.kind == "array":
        return [_node_value(item) for item in node.items]
    return node.value


@pytest.mark.parametrize("raw", ['{}', '[ ]', ' { "a" : [ ] , "b":[1, {"c" :null}] }', '[[],[[ ]] , {}]',
                                 '{\n  "plan": [\n    {"step": "a", "status": "pending"}\n  ]\n}\n'])
def test_the_positioned_scanner_reads_every_container_whole_and_ends_it_at_its_closing_byte(raw: str) -> None:
    scanner = tool_args._Scanner(raw)
    root = scanner.value()
    assert _node_value(root) == json.loads(raw)
    assert raw.encode()[root.start] in b"{[" and raw.encode()[root.end] in b"}]"
    assert raw.encode()[root.end + 1:].strip() == b""


# ----------------------------------------------------------------------------------------- Codex 0.40's shell


def _recorded_as(tmp_path: Path, recorded: str) -> Iterator[Session]:
    """A session whose executor reads a rollout recorded by ``recorded`` (run as the verified 0.149.0)."""
    from forkpoint.adapters.codex.parse import parse_rollout
    from forkpoint.testing.codex_rollouts import simple_rollout

    tmp_path.mkdir(exist_ok=True)
    trajectory = parse_rollout(simple_rollout(1, version=recorded).write(tmp_path / "rollout.jsonl"))
    workspace = tmp_path / "ws"
    (workspace / "sub").mkdir(parents=True)
    (workspace / "sub" / "c.txt").write_text("gamma\n")
    current = Session(workspace, "0.149.0", tmp_path)
    current.executor.close()
    current.executor = CodexToolExecutor(current.context, "0.149.0", native=trajectory.native)
    yield current
    current.executor.close()


@pytest.fixture
def session_040(tmp_path: Path) -> Iterator[Session]:
    yield from _recorded_as(tmp_path, "0.40.0")


def test_shell_is_chosen_by_the_recorded_version(tmp_path: Path, session_040: Session) -> None:
    """A 0.40 recording's shell call runs (argv, workdir, JSON output); on a 0.149 recording it stays unknown."""
    fresh = session_040.call("shell", {"command": ["bash", "-lc", "cat c.txt; echo err >&2; exit 3"],
                                       "workdir": "sub", "timeout_ms": 120000})
    assert normalize_volatile(fresh.content) == (
        f'{{"output":"gamma\\nerr\\n","metadata":{{"exit_code":3,"duration_seconds":"{DURATION_PLACEHOLDER}"}}}}')
    assert fresh.native["tool_profile"] == "0.40.0" and fresh.return_code == 3
    for newer in _recorded_as(tmp_path / "newer", "0.149.0"):
        assert newer.call("shell", {"command": ["ls"]}).content == "unsupported call: shell"


def test_shell_040_errors_timeout_and_arguments(session_040: Session) -> None:
    script = session_040.workspace / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    assert session_040.call("shell", {"command": ["./script.sh"]}).content == (
        "execution error: Permission denied (os error 13)")
    assert session_040.call("shell", {"command": ["pwd"], "workdir": "missing"}).content == (
        "execution error: No such file or directory (os error 2)")
    assert session_040.call("shell", {"command": ["no-such-program-fp"]}).content == (
        "execution error: No such file or directory (os error 2)")
    timed = session_040.call("shell", {"command": ["bash", "-lc", "echo a; sleep 5; echo b"], "timeout_ms": 300})
    assert normalize_volatile(timed.content) == (
        f'{{"output":"command timed out after {DURATION_PLACEHOLDER} milliseconds\\na\\n",'
        f'"metadata":{{"exit_code":124,"duration_seconds":"{DURATION_PLACEHOLDER}"}}}}')
    bad = session_040.call("shell", {"command": "ls"}).content
    assert isinstance(bad, str) and bad.startswith(tool_args.PREFIX + "invalid type: string")
    added = session_040.call("shell", {"command": ["bash", "-lc", "apply_patch <<\"EOF\"\n*** Begin Patch\n"
                                                   "*** Add File: p.txt\n+patched\n*** End Patch\nEOF"]})
    assert normalize_volatile(added.content) == (
        '{"output":"Success. Updated the following files:\\nA p.txt\\n","metadata":{"exit_code":0,'
        f'"duration_seconds":"{DURATION_PLACEHOLDER}"}}}}')
    assert (session_040.workspace / "p.txt").read_text() == "patched\n"
    with pytest.raises(ReplayError) as error:  # Codex 0.40's own parse of other apply_patch scripts: not re-run
        session_040.call("shell", {"command": ["bash", "-lc", "apply_patch \"$(cat p.diff)\" && ls"]})
    assert error.value.before_effect
    plan = {"explanation": "x", "plan": [{"step": "a", "status": "completed"}]}
    assert session_040.call("update_plan", plan).content == "Plan updated"


def test_shell_040_output_cap_lines_and_bytes(session_040: Session) -> None:
    """Over 256 lines: the first and last 128 (joined by newlines, the last newline lost) around the marker;
    long lines: the head within 5 KiB, the whole within 10 KiB."""
    many = json.loads(str(session_040.call("shell", {"command": ["seq", "1", "300"]}).content))["output"]
    head = "\n".join(str(i) for i in range(1, 129))
    tail = "\n".join(str(i) for i in range(173, 301))
    assert many == f"{head}\n[... omitted 44 of 300 lines ...]\n\n{tail}"
    wide = session_040.call("shell", {"command": ["bash", "-c", "l=$(printf 'x%.0s' {1..99}); "
                                                                "for i in {1..300}; do echo \"$l\"; done"]})
    text = json.loads(str(wide.content))["output"]
    first, rest = text.split("\n[... omitted 44 of 300 lines ...]\n\n")
    assert len(first) == 5 * 1024 and len(text.encode()) == 10 * 1024
    assert set(first) <= {"x", "\n"} and rest.endswith("x" * 99)


def test_version_facts_name_the_shell_profile(tmp_path: Path) -> None:
    from forkpoint.adapters.codex import CodexAdapter
    from forkpoint.adapters.codex.parse import parse_rollout
    from forkpoint.testing.codex_rollouts import simple_rollout

    old = CodexAdapter().version_facts(parse_rollout(simple_rollout(1, version="0.40.0").write(tmp_path / "a.jsonl")))
    assert old.tool_version == "0.149.0"
    assert any("Codex 0.40.0's shell tool" in note for note in old.reasons)
    new = CodexAdapter().version_facts(parse_rollout(simple_rollout(1, version="0.171.0").write(tmp_path / "b.jsonl")))
    assert not any("shell tool" in note for note in new.reasons)


def test_shell_profile_takes_only_a_version_number() -> None:
    from forkpoint.adapters.codex.tools import shell_json_profile

    # the bisected change (0.95.0 offers ``shell``, 0.96.0 ``exec_command``): a 0.96-0.148 recording's ``shell``
    # is not Codex 0.40's tool there
    assert shell_json_profile("0.40.0") and shell_json_profile("0.95.0")
    assert not any(shell_json_profile(v) for v in ("0.96.0", "0.138.0", "0.148.9", "0.149.0", "0.171.0", None, "",
                                                   "../../etc/passwd",
                                                   "x" * 10_000, "\x1b[31m0.40"))


def test_shell_040_apply_patch_stays_in_the_workspace(session_040: Session) -> None:
    """A 0.40 apply_patch through shell naming a path outside the workspace changes nothing (refused first)."""
    outside = session_040.workspace.parent / "escape.txt"
    with pytest.raises(ReplayError) as error:
        session_040.call("shell", {"command": ["apply_patch", "*** Begin Patch\n*** Add File: ../escape.txt\n+x\n"
                                                              "*** End Patch\n"]})
    assert error.value.before_effect and not outside.exists()


# -- the recorded-version truncation text (0.96-0.141; the real texts: tests/fixtures/codex/0.96.0/, 0.138.0/) ------


@pytest.mark.parametrize(("recorded", "warning"), [("0.96.0", False), ("0.137.0", False), ("0.138.0", False),
                                                   ("0.141.0", False), ("0.142.0", True),
                                                   ("0.149.0", True), (None, True), ("not-a-version", True)])
def test_the_truncation_profile_is_chosen_by_the_recorded_version(recorded: str | None, warning: bool) -> None:
    from forkpoint.adapters.codex.tools import truncation_warning

    assert truncation_warning(recorded) is warning


def test_a_pre_0142_truncation_has_no_warning_line_and_nothing_else_differs() -> None:
    from forkpoint.adapters.codex.tool_exec import format_unified_output
    from forkpoint.adapters.kit.shell import CommandOutput

    data = "".join(f"{i}\n" for i in range(1, 20001)).encode()
    output = CommandOutput(0, data, b"", len(data), 0.5, False)
    new, _ = format_unified_output(output, 10_000)
    old, header = format_unified_output(output, 10_000, warning=False)
    assert new == "Warning: truncated output (original token count: 27224)\n" + old
    assert old.startswith("Total output lines: 20000\n\n1\n2\n") and old.endswith("\n19999\n20000\n")
    assert header.endswith("Original token count: 27224\nOutput:\n")


def test_a_0138_recording_names_its_truncation_profile(tmp_path: Path) -> None:
    """The observation and the version facts name the recorded-version profile the outputs re-ran with."""
    from forkpoint.adapters import get_adapter
    from forkpoint.adapters.codex.parse import parse_rollout
    from forkpoint.adapters.codex.tools import NO_TRUNCATION_WARNING, CodexToolExecutor

    rollout = Path(__file__).parents[2] / "fixtures" / "codex" / "0.138.0" / "truncation_0138" / "rollout.jsonl"
    trajectory = parse_rollout(rollout)
    facts = get_adapter("codex").version_facts(trajectory)
    assert any(NO_TRUNCATION_WARNING in reason for reason in facts.reasons)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    executor = CodexToolExecutor(RunContext(workspace, tmp_path / "state", tmp_path / "out", "s"), "0.149.0",
                                 native=trajectory.native)
    try:
        fresh = executor.run(ToolCall("c1", "exec_command", {"cmd": "seq 1 20000"}, None))
    finally:
        executor.close()
    assert isinstance(fresh.content, str) and "Output:\nTotal output lines: 20000\n\n1\n" in fresh.content
    assert fresh.native["tool_profile"] == NO_TRUNCATION_WARNING


def test_a_096_recording_re_runs_with_the_truncation_profile_of_its_range(tmp_path: Path) -> None:
    """0.96.0 (the first exec_command release; its real recording) truncates as 0.138-0.141: the fresh output is the
    recorded one and the profile is named by its measured range, 0.96.0-0.141.0."""
    from forkpoint.adapters.codex.parse import parse_rollout
    from forkpoint.adapters.codex.tools import CodexToolExecutor, normalize_volatile

    rollout = Path(__file__).parents[2] / "fixtures" / "codex" / "0.96.0" / "truncation_096" / "rollout.jsonl"
    trajectory = parse_rollout(rollout)
    (call,) = [c for batch in trajectory.batches for c in batch.calls]
    assert call.historical is not None
    workspace = tmp_path / "ws"
    workspace.mkdir()
    executor = CodexToolExecutor(RunContext(workspace, tmp_path / "state", tmp_path / "out", "s"), "0.149.0",
                                 native=trajectory.native)
    try:
        fresh = executor.run(call)
    finally:
        executor.close()
    assert "Warning: truncated output" not in str(fresh.content)
    assert normalize_volatile(fresh.content) == normalize_volatile(call.historical.content)
    assert fresh.native["tool_profile"] == "0.96.0-0.141.0 truncation text"
