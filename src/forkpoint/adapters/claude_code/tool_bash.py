"""Claude Code's Bash tool, re-executed: the same shell wrapper, the same cwd rules, the same output text.

Measured on the real 2.1.220 / 2.1.332 binaries (scripted model, see the fixtures' README):

- Claude runs ``/bin/bash -c "<snapshot> && shopt -u extglob && eval '<command>' < /dev/null && pwd -P >| <file>"``
  in the shell's current directory, stdout and stderr merged. So ``$0`` is ``/bin/bash``, errors read
  ``/bin/bash: line N: ...``, stdin is empty, exported variables do not persist, and the directory only
  moves when the whole command succeeds (``cd sub && false`` stays put; ``exit 0`` skips the ``pwd``).
- A final directory outside the project is reset: ``Shell cwd was reset to <project>`` (toolUseResult stderr
  ``"\\n" + message``).
- The first 30,000 bytes of output count. Success: leading blank lines dropped, trailing whitespace trimmed,
  ``(Bash completed with no output)`` when empty; more than 30,000 bytes of output are saved to
  ``<config>/projects/<project>/<session>/tool-results/<id>.txt`` and replaced by a ``<persisted-output>``
  preview (first 2,000 UTF-16 units, cut at the last newline past unit 1,000).
- Failure: ``Exit code N\\n<output with trailing whitespace trimmed>`` (leading blank lines kept), cut to the
  first and last 5,000 units above 10,000 (2.1.220) / 11,024 (2.1.332) units.
- Host side (forkpoint, outside any sandbox): the command can write only ``<scratch>/shell`` (where the wrapper's
  ``cwd`` file is) and the agent HOME (where ``tool-results`` is); both are read and written through
  forkpoint.core.fs's strict helpers, so a symlink, FIFO or device planted there is refused (executor error), never
  followed, opened blocking or read without bound. The output log stays in ``<scratch>``, out of its reach.
- 2.0.x (``ToolProfile.cat_n_arrows``, measured on 2.0.27): nothing is persisted; output above 30,000 UTF-16
  units keeps its first 30,000 and appends ``\n\n... [N lines truncated] ...`` (N: the lines cut); a failure is
  the output trimmed on both sides, with no ``Exit code N`` line; no output is an empty result.
- Timeout: the recordings moved the command to a background task (a random id and a temp path that cannot
  be replayed, and forkpoint never leaves a process running). The replay kills it and reports what the same
  binaries print with background tasks disabled: ``Exit code 143\\nCommand timed out after <floor(s)>s\\n<output>``.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.adapters.claude_code.jstext import (
    format_file_size,
    js_last_index_of,
    js_len,
    js_slice,
    js_trim,
    js_trim_end,
    strip_leading_blank_lines,
)
from forkpoint.adapters.claude_code.tool_profile import ToolOutcome, ToolProfile, tool_error
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import (
    InputTooLargeError,
    NotRegularFileError,
    PlantedLinkError,
    copy_fd_strict,
    lstat_strict,
    open_regular_strict,
    read_file_strict,
)
from forkpoint.sandbox import local_sandbox
from forkpoint.sandbox.base import within

if TYPE_CHECKING:
    from forkpoint.process import ProcessResult
    from forkpoint.sandbox.base import Sandbox

BASH = "/bin/bash"
DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
MAX_INLINE_BYTES = 30_000
PREVIEW_UNITS = 2_000
ERROR_KEEP_UNITS = 5_000
NO_OUTPUT = "(Bash completed with no output)"
#: Output kept in memory; the full output is in the run's log file (and persisted when large).
HEAD_BYTES = 1024 * 1024
#: 2.0.x keeps this many UTF-16 units of a command's output (its BASH_MAX_OUTPUT_LENGTH default)
V2_0_OUTPUT_UNITS = 30_000

#: Commands whose success is silent: toolUseResult.noOutputExpected (measured: cd, mkdir, touch, export).
SILENT_COMMANDS = frozenset(
    {"cd", "mkdir", "rmdir", "touch", "export", "unset", "mv", "cp", "rm", "chmod", "chown", "chgrp", "ln", "wait"}
)
#: Exit codes Claude Code reported for a shell killed by a signal (measured: SIGKILL -> 1, SIGTERM -> 144).
_SIGNAL_EXIT_CODES = {9: 1, 15: 144}
_SEGMENTS = re.compile(r"\|\||&&|[;|&\n]")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_ID_ALPHABET = "0123456789abcdefghijklmnopqrstuvwxyz"
_MAX_CWD_BYTES = 64 * 1024
_PLANTED = (PlantedLinkError, NotRegularFileError, InputTooLargeError)


def timeout_ms(value: Any) -> int:
    """The call's timeout: Claude's default when absent or not a positive number, capped at its maximum."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        return DEFAULT_TIMEOUT_MS
    return min(int(value), MAX_TIMEOUT_MS)


def is_silent_command(command: str) -> bool:
    segments = [segment.split() for segment in _SEGMENTS.split(command)]
    words = [segment for segment in segments if segment]
    if not words:
        return False
    for segment in words:
        rest = [word for word in segment if not _ASSIGNMENT.match(word)] or ["export"]
        if rest[0] not in SILENT_COMMANDS:
            return False
    return True


def truncate_error_message(message: str, profile: ToolProfile) -> str:
    """Claude's error formatting: above the version's limit keep the first and last 5,000 UTF-16 units."""
    length = js_len(message)
    if length <= profile.error_truncate_above:
        return message
    head = js_slice(message, 0, ERROR_KEEP_UNITS)
    tail = js_slice(message, length - ERROR_KEEP_UNITS)
    return f"{head}\n\n... [{length - 2 * ERROR_KEEP_UNITS} characters truncated] ...\n\n{tail}"


def persisted_output_message(output: str, size: int, path: str) -> str:
    """The ``<persisted-output>`` text that replaces an output of more than 30,000 bytes."""
    if js_len(output) <= PREVIEW_UNITS:
        preview, more = output, False
    else:
        head = js_slice(output, 0, PREVIEW_UNITS)
        newline = js_last_index_of(head, "\n")
        preview = js_slice(output, 0, newline if newline > PREVIEW_UNITS // 2 else PREVIEW_UNITS)
        more = True
    return (
        "<persisted-output>\n"
        f"Output too large ({format_file_size(size)}). Full output saved to: {path}\n\n"
        f"Preview (first {format_file_size(PREVIEW_UNITS)}):\n"
        f"{preview}{chr(10) + '...' + chr(10) if more else chr(10)}</persisted-output>"
    )


def _newlines_after(fd: int, offset: int) -> int:
    """Newlines in the output log past ``offset`` (read in bounded chunks), not counting the trailing ones."""
    count = trailing = 0
    os.lseek(fd, offset, os.SEEK_SET)
    while chunk := os.read(fd, 1 << 20):
        stripped = chunk.rstrip(b" \t\r\n")
        if stripped:
            count += trailing + stripped.count(b"\n")
            trailing = chunk[len(stripped):].count(b"\n")
        else:
            trailing += chunk.count(b"\n")
    return count


def _decode(data: bytes) -> str:
    return data.decode("utf-8", "replace")


class BashShell:
    """The Bash tool of one session: remembers the shell's directory between calls."""

    def __init__(
        self,
        root: str,
        env: Mapping[str, str],
        profile: ToolProfile,
        results_dir: Path,
        scratch: Path,
        sandbox: Sandbox | None = None,
        writable: tuple[Path, ...] = (),
        results_root: Path | None = None,
        readable: tuple[Path, ...] = (),
    ) -> None:
        self.root = root  # as the command sees it (under bwrap: the recorded cwd)
        self.cwd = root
        self.env = dict(env)
        self.profile = profile
        self.results_dir = results_dir
        # The folder the command can write that holds results_dir (the agent HOME): walked strictly from there.
        self.results_root = results_root if results_root is not None else results_dir.parent
        self.results_root.mkdir(parents=True, exist_ok=True)  # forkpoint's (under the state dir): made first
        self.scratch = scratch  # forkpoint's own: the output log
        self.shell_dir = scratch / "shell"  # the command's: the wrapper's cwd file
        self.shell_dir.mkdir(mode=0o700, exist_ok=True)
        self.sandbox = sandbox or local_sandbox(Path(root))
        # Under bwrap one sandbox runs the session's commands (``forkpoint.sandbox.executor``); ``close`` ends it.
        self.executor = self.sandbox.executor()
        self.writable = (self.shell_dir, *writable)  # bound read-write at the same path inside a sandbox
        self.readable = readable  # read-only (the saved large outputs when they live in the continued agent's home)
        for path in readable:  # there before the replay's sandbox starts, so its read-only bind shows later saves
            path.mkdir(parents=True, exist_ok=True)

    def run(self, command: str, timeout: int) -> ToolOutcome:
        cwd = self.cwd if os.path.isdir(self.sandbox.host_path(self.cwd)) else self.root
        cwd_file = self.shell_dir / "cwd"
        log = self.scratch / "output.log"
        # Whatever an earlier command left at these names goes (unlink never follows; nothing of it runs now).
        for stale in (cwd_file, log):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                stale.unlink()
        script = (
            "\\builtin shopt -s expand_aliases 2>/dev/null || true && "
            "\\builtin shopt -u extglob 2>/dev/null || true && "
            f"eval {shlex.quote(command)} < /dev/null && pwd -P >| {shlex.quote(str(cwd_file))}"
        )
        env = dict(self.env)
        env["PWD"] = cwd
        result = self.executor.run(
            [BASH, "-c", script],
            cwd=cwd,
            env=env,
            timeout_s=timeout / 1000,
            writable=self.writable,
            readable=self.readable,
            merge_stderr=True,
            log_path=log,
            max_output_bytes=HEAD_BYTES,
        )
        try:
            log_fd: int | None = open_regular_strict(self.scratch, log.name)
        except FileNotFoundError:
            log_fd = None
        except _PLANTED as exc:
            raise ReplayError(ErrorKind.EXECUTOR, f"the Bash output log was replaced while the command ran: {exc}") \
                from None
        try:
            return self._outcome(command, timeout, result, log_fd, cwd_file)
        finally:
            if log_fd is not None:
                os.close(log_fd)

    def close(self) -> None:
        """End the session's sandbox (and everything still in it)."""
        self.executor.close()

    def _outcome(self, command: str, timeout: int, result: ProcessResult, log_fd: int | None,
                 cwd_file: Path) -> ToolOutcome:
        total = os.fstat(log_fd).st_size if log_fd is not None else len(result.stdout)
        head = _decode(result.stdout[:MAX_INLINE_BYTES])
        if result.timed_out:
            out = js_trim_end(head)
            message = f"Exit code 143\nCommand timed out after {timeout // 1000}s" + (f"\n{out}" if out else "")
            return tool_error(truncate_error_message(message, self.profile), return_code=143)
        code = result.returncode
        if code is None:
            code = 1
        elif code < 0:
            code = _SIGNAL_EXIT_CODES.get(-code, 128 - code)
        if self.profile.cat_n_arrows:
            return self._outcome_v2_0(command, result, log_fd, total, code)
        if code != 0:
            out = js_trim_end(head)
            message = f"Exit code {code}" + (f"\n{out}" if out else "")
            return tool_error(truncate_error_message(message, self.profile), return_code=code)
        reset = self._follow_cwd(cwd_file)
        stdout = js_trim_end(strip_leading_blank_lines(head))
        stderr = f"\nShell cwd was reset to {self.root}" if reset else ""
        native: dict[str, Any] = {
            "stdout": stdout,
            "stderr": stderr,
            "interrupted": False,
            "isImage": False,
            "noOutputExpected": is_silent_command(command),
        }
        truncated = result.log_truncated
        if total > MAX_INLINE_BYTES:
            if log_fd is None:
                raise ReplayError(ErrorKind.EXECUTOR, "the Bash output log disappeared while the command ran")
            path = self._persist(log_fd, total)
            full = js_trim_end(strip_leading_blank_lines(_decode(result.stdout)))
            content = persisted_output_message(full, total, str(path))
            if reset:
                content += f"\n{js_trim(stderr)}"
            native["persistedOutputPath"] = str(path)
            native["persistedOutputSize"] = total
        else:
            content = "\n".join(part for part in (stdout, js_trim(stderr)) if part) or NO_OUTPUT
        return ToolOutcome(content, False, native, truncated, 0)

    def _outcome_v2_0(self, command: str, result: ProcessResult, log_fd: int | None, total: int,
                      code: int) -> ToolOutcome:
        """2.0.x's Bash result: inline, cut at 30,000 units with a count of the lines cut; no exit code line."""
        text = _decode(result.stdout)
        if code != 0:
            return tool_error(truncate_error_message(js_trim(text) or "Error", self.profile), return_code=code)
        self._follow_cwd(self.shell_dir / "cwd")
        full = js_trim_end(text)
        truncated = result.log_truncated
        if len(full) > V2_0_OUTPUT_UNITS:
            more = 0 if total <= len(result.stdout) or log_fd is None else _newlines_after(log_fd, len(result.stdout))
            full = (f"{full[:V2_0_OUTPUT_UNITS]}\n\n... [{len(full[V2_0_OUTPUT_UNITS:].split(chr(10))) + more} lines "
                    "truncated] ...")
            truncated = False
        stdout = strip_leading_blank_lines(full)
        native = {"stdout": stdout, "stderr": "", "interrupted": False, "isImage": False}
        return ToolOutcome(stdout, False, native, truncated, 0)

    def _follow_cwd(self, cwd_file: Path) -> bool:
        """Move to the directory the command ended in; True when it left the project and was reset."""
        try:
            raw = read_file_strict(cwd_file.parent, cwd_file.name, max_bytes=_MAX_CWD_BYTES)
        except _PLANTED as exc:
            raise ReplayError(ErrorKind.EXECUTOR, f"the replayed command replaced the Bash wrapper's cwd file "
                                                  f"({exc}); forkpoint does not follow it") from None
        except OSError:
            return False
        new = os.fsdecode(raw).rstrip("\n")
        if not new or new == self.cwd:
            return False
        if within(new, self.root):
            self.cwd = new
            return False
        self.cwd = self.root
        return True

    def _persist(self, log_fd: int, size: int) -> Path:
        """Copy the full output next to the session, as Claude does (``<id>.txt``, id = ``b`` + 8 of [0-9a-z]).

        The folder is in the agent HOME, which replayed commands can write: no link on the way is followed.
        """
        relative = Path(os.path.relpath(self.results_dir, self.results_root))
        try:
            while True:
                name = "b" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(8))
                if lstat_strict(self.results_root, relative / f"{name}.txt") is None:
                    break
            os.lseek(log_fd, 0, os.SEEK_SET)
            copy_fd_strict(log_fd, self.results_root, relative / f"{name}.txt", max_bytes=size, mode=0o644)
        except _PLANTED as exc:
            raise ReplayError(ErrorKind.EXECUTOR, f"save large Bash output to {self.results_dir}: refused, a "
                                                  f"replayed command planted it: {exc}") from None
        except OSError as exc:
            raise ReplayError(ErrorKind.EXECUTOR, f"save large Bash output to {self.results_dir}: {exc}") from exc
        return self.results_dir / f"{name}.txt"
