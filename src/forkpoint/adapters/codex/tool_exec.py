"""Codex's command tools, re-executed: ``exec_command`` (unified exec) and the legacy ``shell_command``.

How the real binaries run a command (0.149.0 / 0.171.0, measured with ``/proc/$$/cmdline``, ``env`` and
``shopt login_shell`` from inside the command):

- The model's ``cmd`` becomes ``[<shell>, "-lc", cmd]`` (``"-c"`` with ``login: false``); that is the command
  Codex shows in messages. A shell snapshot taken once from a login shell is then sourced and the command is
  ``exec``-ed, so the process is a NON-login ``<shell> -c cmd`` (``$0`` is the shell path) whose environment is
  the login shell's (``/etc/profile``'s PATH) plus Codex's own variables: ``CODEX_HOME``, ``CODEX_SESSION_ID`` /
  ``CODEX_THREAD_ID``, and for exec_command ``NO_COLOR=1 TERM=dumb LANG/LC_CTYPE/LC_ALL=C.UTF-8 COLORTERM=
  PAGER/GIT_PAGER/GH_PAGER=cat CODEX_CI=1``; 0.171 adds ``CODEX_TOOL_CALL_ID``, ``CODEX_VERSION`` and
  ``CODEX_APPLY_PATCH_PRESERVE_LINE_ENDINGS=1``. PATH starts with the runtime's ``codex-path`` dir (bundled rg).
- ``shell`` picks the shell by its name: bash -> the session shell (/bin/bash), sh -> ``sh`` on PATH,
  anything else or not installed -> /bin/sh. ``workdir`` is relative to the session cwd (forkpoint refuses one
  outside the workspace). ``tty: true`` runs on a 24x80 pseudo-terminal (so ``\\n`` becomes ``\\r\\n``) that
  nobody types into.
- stdin is /dev/null, stdout and stderr go to one buffer (their relative order is not deterministic in Codex:
  forkpoint merges them in write order). Output kept: the first and last 512 KiB of the stream.
- exec_command waits ``yield_time_ms`` (default 10,000, clamped to 250..30,000). A command still running then
  stays alive in Codex (``Process running with session ID N``, polled with write_stdin). When the recording shows
  that, the replay keeps it alive too, as a process session (``tool_session``: killed at the end of the replay);
  otherwise it reports the same text and kills it. Background children (``sleep 30 &``) are
  killed when the command exits (Codex left them running; the output is the same).
- ``rm -f`` style commands are refused before running (``tool_policy``).

Output texts (both versions unless noted)::

    Chunk ID: <6 random hex>\\nWall time: <s, 4 decimals> seconds\\nProcess exited with code N\\n
    Original token count: <ceil(raw bytes / 4)>\\nOutput:\\n<output, maybe truncated>

    exec_command failed for `<cmd>`: CreateProcess { message: "Rejected(\\"<reason>\\")" }   (0.149)
    exec_command failed: CreateProcess { message: "Rejected(\\"<reason>\\")" }               (0.171)

    Exit code: N\\nWall time: <s rounded to 0.1> seconds\\n[Total output lines: N\\n]Output:\\n<output>
                                                                    (shell_command, 0.149 only)

Codex 0.40's ``shell`` tool (``shell_json``; measured on 0.40.0, tests/fixtures/codex/0.40.0/shell_040): the
``command`` argv is spawned directly (no shell is added: ``["bash", "-lc", s]`` is a login bash), in ``workdir``
(relative to the session cwd), killed after ``timeout_ms`` (default 10,000). The output is compact JSON::

    {"output":"<stdout+stderr>","metadata":{"exit_code":N,"duration_seconds":<s rounded to 0.1>}}

A timeout is exit code 124 and the output starts ``command timed out after <ms> milliseconds\\n`` (Codex kills
the direct child only and then waits for the pipes to close, so its duration includes what a background child
kept running; forkpoint kills the group: the measured values are volatile). Output over 10 KiB or 256 lines
keeps its first and last 128 lines (``str::lines``, joined by ``\\n``: the final newline is lost) around
``\\n[... omitted N of M lines ...]\\n\\n``, the head within 5 KiB, the whole within 10 KiB. A program or workdir
that cannot be spawned answers ``execution error: <io error>`` (``No such file or directory (os error 2)``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import re
import secrets
import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.adapters.codex import tool_args
from forkpoint.adapters.codex.tool_policy import RM_FORCE_REASON, is_rm_force
from forkpoint.adapters.codex.tool_session import (
    DEFAULT_WRITE_YIELD_MS,
    MAX_POLL_YIELD_MS,
    MAX_WRITE_YIELD_MS,
    MIN_POLL_YIELD_MS,
    MIN_WRITE_YIELD_MS,
    SLACK_S,
    STDIN_CLOSED,
    ProcessSessions,
    Recorded,
    clamp,
    session_id_argument,
)
from forkpoint.adapters.codex.tool_text import (
    approx_tokens,
    decode_lossy,
    decode_smart,
    io_error,
    needs_truncation,
    rust_debug,
    rust_lines,
    rust_lines_count,
    seconds_one_decimal,
    shlex_join,
    truncate_middle,
)
from forkpoint.adapters.kit.shell import CommandOutput, CommandSpec, Runner, run_command
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.sandbox import local_sandbox
from forkpoint.sandbox.base import inside_roots

if TYPE_CHECKING:
    from forkpoint.sandbox.base import Sandbox

#: Codex starts its yield clock and wall time ~0.145 s after spawning the command (measured: ``sleep 0.4``
#: reports ``Wall time: 0.2543``, a quick command ``0.0000``); the replay does the same.
EXEC_START_OFFSET_S = 0.145
DEFAULT_YIELD_MS = 10_000
MIN_YIELD_MS = 250
MAX_YIELD_MS = 30_000
DEFAULT_MAX_OUTPUT_TOKENS = 10_000  # also the cap: the model's truncation budget (gpt-5.5)
UNIFIED_OUTPUT_MAX_BYTES = 1024 * 1024  # head + tail kept by exec_command
LEGACY_OUTPUT_MAX_BYTES = 1024 * 1024  # head kept by shell_command
LEGACY_DEFAULT_TIMEOUT_MS = 10_000
LEGACY_TIMEOUT_EXIT_CODE = 124
SHELL_JSON_PROFILE = "0.40.0"  # the release whose shell tool this reproduces (named in each observation)
SHELL_JSON_DEFAULT_TIMEOUT_MS = 10_000
SHELL_JSON_MAX_BYTES = 10 * 1024
SHELL_JSON_MAX_LINES = 256
SHELL_JSON_HEAD_LINES = 128
SHELL_JSON_HEAD_BYTES = SHELL_JSON_MAX_BYTES // 2
SHELL_JSON_KEEP_HEAD = 8 * 1024 * 1024  # bytes forkpoint keeps to count lines and take the head
SHELL_JSON_KEEP_TAIL = 1024 * 1024
SESSION_SHELL = "/bin/bash"
FALLBACK_SHELL = "/bin/sh"
UNIFIED_EXEC_ENV = {
    "NO_COLOR": "1",
    "TERM": "dumb",
    "LANG": "C.UTF-8",
    "LC_CTYPE": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "COLORTERM": "",
    "PAGER": "cat",
    "GIT_PAGER": "cat",
    "GH_PAGER": "cat",
    "CODEX_CI": "1",
}
_DROPPED_FROM_SNAPSHOT = frozenset({"PWD", "OLDPWD", "SHLVL", "_"})
_ENV_MARKER = b"\0__forkpoint_login_env__\0"
_IO_KINDS = {errno.ENOENT: "NotFound", errno.ENOTDIR: "NotADirectory", errno.EACCES: "PermissionDenied"}


# ----------------------------------------------------------------------------------------- environment


@dataclass(frozen=True)
class ExecProfile:
    """What differs between the verified versions."""

    version: str
    failure_names_command: bool  # 0.149: "exec_command failed for `<cmd>`: ..."
    per_call_env: bool  # 0.171: CODEX_TOOL_CALL_ID, CODEX_VERSION, CODEX_APPLY_PATCH_PRESERVE_LINE_ENDINGS
    #: a truncated output starts ``Warning: truncated output (original token count: N)`` (0.142 on; a recording
    #: of an earlier release re-runs without it: ``tools.truncation_warning``)
    truncation_warning: bool = True


class Environment:
    """The environment Codex gives commands, built once per run (the login snapshot is taken lazily)."""

    def __init__(
        self,
        base: Mapping[str, str],
        workspace: Path,
        home: Path,
        session_id: str | None,
        path_prepend: Path | None,
        scratch: Path,
        runner: Runner | None = None,
    ) -> None:
        env = {k: v for k, v in base.items() if not k.startswith("CODEX_") and k not in _DROPPED_FROM_SNAPSHOT}
        env["HOME"] = str(home)
        self.base = env
        self.workspace = workspace  # the session cwd as commands see it
        self.session_id = session_id
        self.path_prepend = path_prepend
        self.scratch = scratch
        self.runner = runner or Runner(
            local_sandbox(workspace), (home,), (path_prepend,) if path_prepend is not None else ()
        )
        self.codex_home = home / ".codex"
        self._login: dict[str, str] | None = None

    def login(self) -> dict[str, str]:
        """The exported environment of a login shell started with the base environment (Codex's snapshot)."""
        if self._login is None:
            self._login = dict(self.base)
            spec = CommandSpec(
                (SESSION_SHELL, "-lc", "printf '\\0__forkpoint_login_env__\\0'; env -0"),
                self.workspace,
                self.base,
                10.0,
                4 * 1024 * 1024,
                0,
            )
            with contextlib.suppress(ReplayError, OSError):
                output = run_command(spec, self.scratch, self.runner)
                if output.returncode == 0 and _ENV_MARKER in output.head:
                    dump = output.head.split(_ENV_MARKER, 1)[1]
                    captured = {}
                    for entry in dump.split(b"\0"):
                        name, sep, value = entry.partition(b"=")
                        if sep and name:
                            captured[os.fsdecode(name)] = os.fsdecode(value)
                    self._login = {k: v for k, v in captured.items() if k not in _DROPPED_FROM_SNAPSHOT}
        return self._login

    def build(self, *, login: bool, unified: bool, profile: ExecProfile, call_id: str) -> dict[str, str]:
        env = dict(self.login() if login else self.base)
        env["HOME"] = self.base["HOME"]
        env["CODEX_HOME"] = str(self.codex_home)
        if self.session_id:
            env["CODEX_SESSION_ID"] = self.session_id
            env["CODEX_THREAD_ID"] = self.session_id
        if profile.per_call_env:
            env["CODEX_TOOL_CALL_ID"] = call_id
            env["CODEX_VERSION"] = profile.version
            env["CODEX_APPLY_PATCH_PRESERVE_LINE_ENDINGS"] = "1"
        if unified:
            env.update(UNIFIED_EXEC_ENV)
        if self.path_prepend is not None:
            path = env.get("PATH", "")
            env["PATH"] = f"{self.path_prepend}:{path}" if path else str(self.path_prepend)
        return env

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.base.get("PATH", os.defpath))


def resolve_shell(requested: str | None, environment: Environment) -> str:
    """The shell Codex runs for the model's ``shell`` argument (measured: see the module docstring)."""
    if requested is None:
        return SESSION_SHELL
    name = os.path.basename(requested)
    if name == os.path.basename(SESSION_SHELL):
        return SESSION_SHELL
    if name in ("sh", "zsh"):
        return environment.which(name) or FALLBACK_SHELL
    return FALLBACK_SHELL


# ----------------------------------------------------------------------------------------- the tools


@dataclass(frozen=True)
class ExecOutcome:
    content: str | list[dict[str, str]]  # a list only for view_image's input_image item
    return_code: int | None
    native: dict[str, Any]
    truncated: bool = False


def _create_process_failure(profile: ExecProfile, display: str, reason: str) -> str:
    message = f"Rejected({rust_debug(reason)})"
    prefix = f"exec_command failed for `{display}`: " if profile.failure_names_command else "exec_command failed: "
    return f"{prefix}CreateProcess {{ message: {rust_debug(message)} }}"


def _positive_int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else default


def format_unified_output(
    output: CommandOutput, max_tokens: int, session_id: int | None = None, start_offset: float = EXEC_START_OFFSET_S,
    *, warning: bool = True,
) -> tuple[str, str]:
    """(the text after ``Output:\\n``, the whole header) for one exec_command / write_stdin result; ``warning``:
    a truncated text starts with the ``Warning: truncated output`` line (``ExecProfile.truncation_warning``)."""
    head, tail, total = output.head, output.tail, output.total_bytes
    omitted = max(total - len(head) - len(tail), 0)
    collected = head + (f"\n... {omitted} bytes omitted ...\n".encode() + tail if omitted else tail)
    text = decode_lossy(collected)
    tokens = approx_tokens(total)
    if needs_truncation(text, max_tokens):
        second = f"... {omitted} bytes omitted ..." if omitted else f"Total output lines: {rust_lines_count(text)}"
        truncated = truncate_middle(text, max_tokens)
        text = f"{second}\n\n{truncated}"
        if warning:
            text = f"Warning: truncated output (original token count: {tokens})\n{text}"
    chunk_id = "".join(secrets.choice("0123456789abcdef") for _ in range(6))
    wall = max(output.wall_time_s - start_offset, 0.0)
    lines = [f"Chunk ID: {chunk_id}", f"Wall time: {wall:.4f} seconds"]
    if output.returncode is not None:
        lines.append(f"Process exited with code {output.returncode}")
    else:
        running = session_id if session_id is not None else 1000 + secrets.randbelow(99_000)
        lines.append(f"Process running with session ID {running}")
    lines += [f"Original token count: {tokens}", "Output:"]
    return text, "\n".join(lines) + "\n"


def _json_string(value: str) -> str:
    """serde_json's string escaping (compact; non-ASCII kept; control characters as ``\\u00xx``)."""
    return json.dumps(value, ensure_ascii=False)


def _take_head(text: str, budget: int) -> str:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= budget:
        return text
    return data[:budget].decode("utf-8", "ignore")


def _take_tail(text: str, budget: int) -> str:
    data = text.encode("utf-8", "surrogatepass")
    if len(data) <= budget:
        return text
    return data[len(data) - budget:].decode("utf-8", "ignore")


def format_shell_json_output(text: str) -> str:
    """Codex 0.40's head+tail cap of a ``shell`` output for the model (see the module docstring)."""
    lines = rust_lines(text)
    total = len(lines)
    if len(text.encode("utf-8", "surrogatepass")) <= SHELL_JSON_MAX_BYTES and total <= SHELL_JSON_MAX_LINES:
        return text
    head_take = min(SHELL_JSON_HEAD_LINES, total)
    tail_take = min(SHELL_JSON_MAX_LINES - SHELL_JSON_HEAD_LINES, total - head_take)
    omitted = total - head_take - tail_take
    head = "\n".join(lines[:head_take])
    tail = "\n".join(lines[total - tail_take:]) if tail_take else ""
    marker = f"\n[... omitted {omitted} of {total} lines ...]\n\n"
    result = _take_head(head, SHELL_JSON_HEAD_BYTES) + marker
    remaining = max(SHELL_JSON_MAX_BYTES - len(result.encode("utf-8", "surrogatepass")), 0)
    return result + (_take_tail(tail, remaining) if remaining else "")


_HEREDOC = re.compile(r"\A\s*(?:apply_patch|applypatch)\s+<<\s*(['\"]?)(\w+)\1[ \t]*\n(.*?)\n\2[ \t]*\n?\s*\Z",
                      re.DOTALL)


def shell_apply_patch(argv: list[str]) -> str | None:
    """The patch of a Codex 0.40 ``shell`` call that Codex ran as its built-in apply_patch (measured: the argv
    ``["apply_patch", patch]``, or ``[shell, "-lc", "apply_patch <<'EOF'\\n...\\nEOF\\n"]``); None for any other
    call. A script that starts with apply_patch in another form is refused (Codex's own parse is not reproduced)."""
    if len(argv) == 2 and argv[0] in ("apply_patch", "applypatch"):
        return argv[1]
    if len(argv) == 3 and argv[1] == "-lc" and argv[2].lstrip().startswith(("apply_patch", "applypatch")):
        match = _HEREDOC.match(argv[2])
        if match is None:
            raise ReplayError(ErrorKind.EXECUTOR, "Codex 0.40 ran this shell script through its apply_patch parser, "
                              "which forkpoint reproduces only for a plain heredoc (the recorded output is reused)",
                              before_effect=True)
        return match.group(3) + "\n"
    if argv and os.path.basename(argv[0]) in ("apply_patch", "applypatch"):
        raise ReplayError(ErrorKind.EXECUTOR, "an apply_patch argv Codex 0.40 may have intercepted; the recorded "
                          "output is reused", before_effect=True)
    return None


def shell_json_content(output: str, exit_code: int, duration_s: float) -> str:
    """The JSON text Codex 0.40 returns for a finished ``shell`` call."""
    duration = math.floor(duration_s * 10 + 0.5) / 10
    return (f'{{"output":{_json_string(output)},"metadata":{{"exit_code":{exit_code},'
            f'"duration_seconds":{duration!r}}}}}')


class CommandTools:
    """exec_command and shell_command for one run (calls run one at a time)."""

    def __init__(
        self,
        workspace: Path,
        environment: Environment,
        profile: ExecProfile,
        scratch: Path,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.workspace = workspace
        self.sandbox = sandbox or environment.runner.sandbox
        # Paths as the commands see them: the session cwd (under bwrap the recorded one) and every spelling of it.
        self.cwd = self.sandbox.cwd
        self.roots = {os.path.normpath(root) for root in (self.cwd, os.path.realpath(self.cwd), *self.sandbox.roots)}
        self.environment = environment
        self.profile = profile
        self.scratch = scratch
        self.sessions = ProcessSessions(environment.runner)

    def _workdir(self, value: Any, tool: str) -> str:
        if value is None:
            return self.cwd
        if not isinstance(value, str) or "\0" in value:
            raise ReplayError(ErrorKind.EXECUTOR, f"{tool} workdir is not a path", before_effect=True)
        return inside_roots(value, self.cwd, self.roots, f"{tool} workdir {value!r} is outside the workspace "
                                                         f"{self.cwd}; forkpoint runs commands only there")

    @staticmethod
    def _command(value: Any, tool: str) -> str:
        if not isinstance(value, str) or "\0" in value:
            raise ReplayError(ErrorKind.EXECUTOR, f"{tool} has no runnable command string", before_effect=True)
        return value

    def exec_command(
        self, arguments: dict[str, Any], raw: str, call_id: str, recorded: Recorded | None = None
    ) -> ExecOutcome:
        problem = tool_args.check(raw, tool_args.EXEC_COMMAND)
        if problem is not None:
            return ExecOutcome(problem, None, {"rejected": "arguments"})
        cmd = self._command(arguments.get("cmd"), "exec_command")
        login = arguments.get("login") is not False
        shell = resolve_shell(arguments.get("shell"), self.environment)
        workdir = self._workdir(arguments.get("workdir"), "exec_command")
        yield_ms = min(max(_positive_int(arguments.get("yield_time_ms"), DEFAULT_YIELD_MS), MIN_YIELD_MS), MAX_YIELD_MS)
        requested_tokens = arguments.get("max_output_tokens")
        max_tokens = min(_positive_int(requested_tokens, DEFAULT_MAX_OUTPUT_TOKENS), DEFAULT_MAX_OUTPUT_TOKENS)
        derived = [shell, "-lc" if login else "-c", cmd]
        display = shlex_join(derived)
        if is_rm_force(derived):
            reason = f"`{display}` rejected: {RM_FORCE_REASON}"
            return ExecOutcome(_create_process_failure(self.profile, display, reason), None, {"rejected": "policy"})
        host = self.sandbox.host_path(workdir)
        if not os.path.isdir(host):
            code = errno.ENOTDIR if os.path.lexists(host) else errno.ENOENT
            reason = f"Failed to create unified exec process: {io_error(code)}"
            return ExecOutcome(_create_process_failure(self.profile, display, reason), None, {"rejected": "workdir"})
        env = self.environment.build(login=login, unified=True, profile=self.profile, call_id=call_id)
        half = UNIFIED_OUTPUT_MAX_BYTES // 2
        tty = arguments.get("tty") is True
        if recorded is not None and recorded.running and recorded.session_id is not None:
            return self._exec_session(shell, cmd, workdir, env, tty, yield_ms, max_tokens, recorded)
        timeout = yield_ms / 1000 + EXEC_START_OFFSET_S
        spec = CommandSpec((shell, "-c", cmd), Path(workdir), env, timeout, half, half, tty)
        output = run_command(spec, self.scratch, self.environment.runner)
        text, header = format_unified_output(output, max_tokens, warning=self.profile.truncation_warning)
        native = {
            "exit_code": output.returncode,
            "wall_time_s": output.wall_time_s,
            "killed_at_yield": output.returncode is None,
            "background_cleanup": output.background_cleanup,
        }
        return ExecOutcome(header + text, output.returncode, native, output.capture_incomplete)

    def _exec_session(self, shell: str, cmd: str, workdir: str, env: dict[str, str], tty: bool, yield_ms: int,
                      max_tokens: int, recorded: Recorded) -> ExecOutcome:
        """An exec_command the recording shows still running at its yield: it stays alive as a process session."""
        assert recorded.session_id is not None
        started = time.monotonic()
        process = self.sessions.start([shell, "-c", cmd], workdir, env, tty)
        self.sessions.keep(recorded.session_id, process)
        key = self.sessions.keys[recorded.session_id]
        output = self.sessions.collect(process, started + EXEC_START_OFFSET_S, yield_ms / 1000, recorded)
        if process.exited:
            self.sessions.drop(recorded.session_id)
        text, header = format_unified_output(output, max_tokens, recorded.session_id, 0.0,
                                            warning=self.profile.truncation_warning)
        native = {"exit_code": output.returncode, "session_id": recorded.session_id, "session_key": key,
                  "background_cleanup": output.background_cleanup}
        return ExecOutcome(header + text, output.returncode, native, output.capture_incomplete)

    def write_stdin(self, arguments: dict[str, Any], recorded: Recorded | None) -> ExecOutcome:
        """Type into / poll a live process session (``tool_session``)."""
        session_id = session_id_argument(arguments.get("session_id"))
        chars = arguments.get("chars", "")
        if not isinstance(chars, str):
            raise ReplayError(ErrorKind.EXECUTOR, "write_stdin chars is not a string", before_effect=True)
        process = self.sessions.live.get(session_id)
        if process is None:
            return ExecOutcome(f"write_stdin failed: Unknown process id {session_id}", None, {"unknown_session": True})
        requested = _positive_int(arguments.get("yield_time_ms"), DEFAULT_WRITE_YIELD_MS)
        if chars:
            yield_ms = clamp(requested, MIN_WRITE_YIELD_MS, MAX_WRITE_YIELD_MS)
            if not process.has_stdin:
                return ExecOutcome(STDIN_CLOSED, None, {"session_id": session_id, "stdin_closed": True})
            # a process that exited since the last call cannot take it: its output and exit are reported below
            process.write(chars.encode("utf-8", "surrogatepass"), time.monotonic() + yield_ms / 1000 + SLACK_S)
        else:
            yield_ms = clamp(requested, MIN_POLL_YIELD_MS, MAX_POLL_YIELD_MS)
        requested_tokens = arguments.get("max_output_tokens")
        max_tokens = min(_positive_int(requested_tokens, DEFAULT_MAX_OUTPUT_TOKENS), DEFAULT_MAX_OUTPUT_TOKENS)
        started = time.monotonic()
        key = self.sessions.keys[session_id]
        output = self.sessions.collect(process, started, yield_ms / 1000, recorded)
        if process.exited:
            self.sessions.drop(session_id)
        text, header = format_unified_output(output, max_tokens, session_id, 0.0,
                                            warning=self.profile.truncation_warning)
        native = {"exit_code": output.returncode, "session_id": session_id, "session_key": key}
        return ExecOutcome(header + text, output.returncode, native, output.capture_incomplete)

    def close(self) -> None:
        self.sessions.close()

    def shell_command(self, arguments: dict[str, Any], raw: str) -> ExecOutcome:
        problem = tool_args.check(raw, tool_args.SHELL_COMMAND)
        if problem is not None:
            return ExecOutcome(problem, None, {"rejected": "arguments"})
        command = self._command(arguments.get("command"), "shell_command")
        login = arguments.get("login") is not False
        workdir = self._workdir(arguments.get("workdir"), "shell_command")
        timeout_ms = _positive_int(arguments.get("timeout_ms"), LEGACY_DEFAULT_TIMEOUT_MS)
        derived = [SESSION_SHELL, "-lc" if login else "-c", command]
        display = shlex_join(derived)
        if is_rm_force(derived):
            return ExecOutcome(f"`{display}` rejected: {RM_FORCE_REASON}", None, {"rejected": "policy"})
        host = self.sandbox.host_path(workdir)
        if not os.path.isdir(host):
            code = errno.ENOTDIR if os.path.lexists(host) else errno.ENOENT
            kind = _IO_KINDS.get(code, "Other")
            message = rust_debug(os.strerror(code))
            failure = f"execution error: Io(Os {{ code: {code}, kind: {kind}, message: {message} }})"
            return ExecOutcome(failure, None, {"rejected": "workdir"})
        env = self.environment.build(login=login, unified=False, profile=self.profile, call_id="")
        spec = CommandSpec(
            (SESSION_SHELL, "-c", command), Path(workdir), env, max(timeout_ms, 1) / 1000, LEGACY_OUTPUT_MAX_BYTES, 0
        )
        output = run_command(spec, self.scratch, self.environment.runner)
        text = decode_smart(output.head)
        code = output.returncode if output.returncode is not None else LEGACY_TIMEOUT_EXIT_CODE
        if output.returncode is None:
            text = f"command timed out after {int(output.wall_time_s * 1000)} milliseconds\n{text}"
        lines = ""
        if needs_truncation(text, DEFAULT_MAX_OUTPUT_TOKENS):
            lines = f"Total output lines: {rust_lines_count(text)}\n"
        body = truncate_middle(text, DEFAULT_MAX_OUTPUT_TOKENS)
        wall = seconds_one_decimal(output.wall_time_s)
        content = f"Exit code: {code}\nWall time: {wall} seconds\n{lines}Output:\n{body}"
        native = {"exit_code": code, "wall_time_s": output.wall_time_s, "timed_out": output.returncode is None}
        return ExecOutcome(content, code, native, output.capture_incomplete)

    def shell_json(self, arguments: dict[str, Any], raw: str) -> ExecOutcome:
        """Codex 0.40's ``shell`` tool: an argv run directly, answered as JSON (see the module docstring)."""
        problem = tool_args.check(raw, tool_args.SHELL_040)
        if problem is not None:
            return ExecOutcome(problem, None, {"rejected": "arguments"})
        argv = arguments.get("command")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and "\0" not in a for a in argv):
            raise ReplayError(ErrorKind.EXECUTOR, "shell has no runnable argv", before_effect=True)
        if shell_apply_patch(argv) is not None:  # the executor runs these (tools.CodexToolExecutor)
            raise ReplayError(ErrorKind.EXECUTOR, "shell apply_patch reached the command runner", before_effect=True)
        workdir = self._workdir(arguments.get("workdir"), "shell")
        timeout_ms = _positive_int(arguments.get("timeout_ms"), SHELL_JSON_DEFAULT_TIMEOUT_MS)
        env = self.environment.build(login=False, unified=False, profile=self.profile, call_id="")
        native: dict[str, Any] = {"tool_profile": SHELL_JSON_PROFILE}
        host = self.sandbox.host_path(workdir)
        code = 0 if os.path.isdir(host) else errno.ENOTDIR if os.path.lexists(host) else errno.ENOENT
        if not code:
            code = self._spawnable(argv[0], workdir, env)
        if code:
            return ExecOutcome(f"execution error: {io_error(code)}", None, {**native, "rejected": "spawn"})
        spec = CommandSpec(tuple(argv), Path(workdir), env, max(timeout_ms, 1) / 1000, SHELL_JSON_KEEP_HEAD,
                           SHELL_JSON_KEEP_TAIL)
        output = run_command(spec, self.scratch, self.environment.runner)
        text = decode_lossy(output.head + output.tail)
        exit_code = output.returncode if output.returncode is not None else LEGACY_TIMEOUT_EXIT_CODE
        if output.returncode is None:
            text = f"command timed out after {int(output.wall_time_s * 1000)} milliseconds\n{text}"
        content = shell_json_content(format_shell_json_output(text), exit_code, output.wall_time_s)
        native.update(exit_code=exit_code, wall_time_s=output.wall_time_s, timed_out=output.returncode is None)
        incomplete = output.capture_incomplete or output.total_bytes > len(output.head) + len(output.tail)
        return ExecOutcome(content, exit_code, native, incomplete)

    def _spawnable(self, program: str, workdir: str, env: Mapping[str, str]) -> int:
        """0 when ``program`` can be executed the way Rust's ``Command`` finds it, else the errno it fails with."""
        if "/" in program:
            candidates = [self.sandbox.host_path(os.path.join(workdir, program))]
        else:
            candidates = [os.path.join(d or ".", program) for d in env.get("PATH", os.defpath).split(":")]
        found = errno.ENOENT
        for candidate in candidates:
            if os.path.isfile(candidate):
                if os.access(candidate, os.X_OK):
                    return 0
                found = errno.EACCES
        return found
