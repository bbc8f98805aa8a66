"""Codex's ``apply_patch``, re-executed in the workspace: confinement, verification, the file effects and texts.

The grammar and the matching are pure (``tool_patch_grammar``); this module reads and writes the files.

Results: ``Exit code: 0\\nWall time: 0 seconds\\nOutput:\\nSuccess. Updated the following files:\\n`` then
``A``/``M``/``D`` lines (added, then modified, then deleted; paths as written, a move shows its destination).
Everything is verified before anything is written: a failure is ``apply_patch verification failed: <reason>``
and nothing changes. A write that fails later gives ``Exit code: 1`` and ``Failed to write file <abs>``.

Confinement (forkpoint's, not Codex's): every path of the patch must lie in the workspace, checked for the whole
patch before anything happens; reads and writes go through ``forkpoint.core.fs`` so a symlink cannot lead outside.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from forkpoint.adapters.codex.tool_patch_grammar import (
    EMPTY_PATCH,
    VERIFICATION_FAILED,
    Hunk,
    PatchParseError,
    PatchVerifyError,
    parse_patch,
    updated_contents,
)
from forkpoint.adapters.codex.tool_text import io_error, seconds_one_decimal, utf8_error
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import (
    DEFAULT_MAX_INPUT_BYTES,
    ConfinementError,
    NotRegularFileError,
    open_confined,
    read_regular_file,
    write_file_confined,
)
from forkpoint.sandbox.base import within


@dataclass(frozen=True)
class PatchResult:
    """The tool's text, its exit code and the absolute paths it changed (for the replay's file inventory)."""

    content: str
    exit_code: int | None  # None when Codex refused the patch before running it
    changed: tuple[str, ...] = ()


def join_path(cwd: str, path: str) -> str:
    """Rust's ``Path::join`` as displayed: an absolute path replaces ``cwd``, otherwise one ``/`` separates."""
    if path.startswith("/"):
        return path
    return cwd + path if cwd.endswith("/") else f"{cwd}/{path}"


def _path_key(path: str) -> str:
    """Rust compares paths by components: empty and ``.`` components (but not a leading ``.``) do not count."""
    parts = [part for index, part in enumerate(path.split("/")) if part not in ("", ".") or (index == 0 and part)]
    return ("/" if path.startswith("/") else "") + "/".join(parts)


def _inside(root: Path, absolute: str, aliases: tuple[str, ...] = ()) -> bool:
    normal = os.path.normpath(absolute)
    bases = {os.path.normpath(os.path.abspath(root)), os.path.realpath(root), *map(os.path.normpath, aliases)}
    return any(within(normal, base) for base in bases)


class ApplyPatch:
    """Applies one patch in ``root`` (the workspace, which is also Codex's cwd for the patch).

    In a sandbox, ``cwd`` is the session cwd as the tools see it (under bwrap the recorded cwd), ``aliases`` the
    spellings of the workspace that are not its host path (resolved by forkpoint's confined walk) and
    ``host_path`` maps a path the tools see to the host (for existence checks); texts name the tools' paths.
    """

    def __init__(
        self,
        root: Path,
        preserve_line_endings: bool,
        *,
        cwd: str | None = None,
        aliases: tuple[str, ...] = (),
        host_path: Callable[[str], str] | None = None,
    ) -> None:
        self.root = root
        self.cwd = cwd if cwd is not None else os.path.abspath(root)
        self.aliases = aliases
        self._host: Callable[[str], str] = host_path if host_path is not None else (lambda path: path)
        self.preserve_line_endings = preserve_line_endings

    def run(self, text: str) -> PatchResult:
        started = time.monotonic()
        try:
            hunks = parse_patch(text)
        except PatchParseError as error:
            return PatchResult(VERIFICATION_FAILED + error.message, None)
        if not hunks:
            return PatchResult(EMPTY_PATCH, None)
        self._confine(hunks)
        seen: set[str] = set()
        for hunk in hunks:
            key = _path_key(join_path(self.cwd, hunk.path))
            if key in seen:
                message = f"invalid patch: multiple operations target {join_path(self.cwd, hunk.path)}"
                return PatchResult(VERIFICATION_FAILED + message, None)
            seen.add(key)
        try:
            for hunk in hunks:
                self._verify(hunk)
        except PatchVerifyError as error:
            return PatchResult(VERIFICATION_FAILED + error.message, None)
        except ConfinementError as error:
            raise ReplayError(ErrorKind.EXECUTOR, f"apply_patch: {error}", before_effect=True) from error
        return self._apply(hunks, started)

    def _confine(self, hunks: list[Hunk]) -> None:
        for hunk in hunks:
            for path in (hunk.path, hunk.move_path):
                if path is not None and not _inside(self.root, join_path(self.cwd, path), self.aliases):
                    raise ReplayError(
                        ErrorKind.EXECUTOR,
                        f"apply_patch path {path!r} is outside the workspace {self.cwd}; nothing was changed",
                        before_effect=True,
                    )

    def _read(self, absolute: str, context: str) -> str:
        try:
            result = read_regular_file(self.root, absolute, max_bytes=DEFAULT_MAX_INPUT_BYTES, aliases=self.aliases)
        except ConfinementError:
            raise
        except NotRegularFileError as error:
            raise PatchVerifyError(f"{context} {absolute}: path `{absolute}` is not a file") from error
        except OSError as error:
            code = error.errno if error.errno is not None else errno.EIO
            raise PatchVerifyError(f"{context} {absolute}: {io_error(code)}") from error
        if result.truncated:
            raise ReplayError(ErrorKind.EXECUTOR, f"apply_patch: {absolute} is too large", before_effect=True)
        problem = utf8_error(result.data)
        if problem is not None:
            raise PatchVerifyError(f"{context} {absolute}: {problem}")
        return result.data.decode("utf-8")

    def _updated(self, hunk: Hunk) -> str:
        absolute = join_path(self.cwd, hunk.path)
        original = self._read(absolute, "Failed to read file to update")
        return updated_contents(original, absolute, hunk.chunks, self.preserve_line_endings)

    def _verify(self, hunk: Hunk) -> None:
        """Check one hunk against the files as they are before anything is written."""
        if hunk.kind == "delete":
            self._read(join_path(self.cwd, hunk.path), "Failed to read")
        elif hunk.kind == "update":
            self._updated(hunk)

    def _apply(self, hunks: list[Hunk], started: float) -> PatchResult:
        """Apply the hunks in order; an update is computed again from the file as earlier hunks left it
        (measured: a move onto a file that a later hunk updates makes that hunk fail with exit code 1)."""
        added: list[str] = []
        modified: list[str] = []
        deleted: list[str] = []
        changed: list[str] = []
        for hunk in hunks:
            absolute = join_path(self.cwd, hunk.path)
            try:
                new_contents = self._updated(hunk) if hunk.kind == "update" else None
                if hunk.kind == "add":
                    self._write(absolute, hunk.contents)
                    added.append(hunk.path)
                    changed.append(absolute)
                elif hunk.kind == "delete":
                    self._unlink(absolute, f"Failed to delete file {absolute}")
                    deleted.append(hunk.path)
                    changed.append(absolute)
                elif hunk.move_path is not None:
                    destination = join_path(self.cwd, hunk.move_path)
                    self._write(destination, new_contents or "")
                    changed.append(destination)
                    self._unlink(absolute, f"Failed to remove original {absolute}")
                    modified.append(hunk.move_path)
                    changed.append(absolute)
                else:
                    self._write(absolute, new_contents or "")
                    modified.append(hunk.path)
                    changed.append(absolute)
            except (_ApplyFailure, PatchVerifyError) as failure:
                wall = seconds_one_decimal(time.monotonic() - started)
                return PatchResult(f"Exit code: 1\nWall time: {wall} seconds\nOutput:\n{failure}\n", 1, tuple(changed))
            except ConfinementError as error:
                raise ReplayError(
                    ErrorKind.EXECUTOR, f"apply_patch: {error}", before_effect=not changed
                ) from error
        summary = ["Success. Updated the following files:"]
        summary += [f"A {path}" for path in added] + [f"M {path}" for path in modified]
        summary += [f"D {path}" for path in deleted]
        wall = seconds_one_decimal(time.monotonic() - started)
        body = "\n".join(summary) + "\n"
        return PatchResult(f"Exit code: 0\nWall time: {wall} seconds\nOutput:\n{body}", 0, tuple(changed))

    def _write(self, absolute: str, contents: str) -> None:
        parent = os.path.dirname(absolute)
        parent_existed = os.path.lexists(self._host(parent))
        try:
            write_file_confined(
                self.root, absolute, contents.encode("utf-8"), create_parents=True, aliases=self.aliases
            )
        except (ConfinementError, ReplayError):
            raise
        except (OSError, NotRegularFileError) as error:
            if not parent_existed and not os.path.isdir(self._host(parent)):
                raise _ApplyFailure(f"Failed to create parent directories for {absolute}") from error
            raise _ApplyFailure(f"Failed to write file {absolute}") from error

    def _unlink(self, absolute: str, message: str) -> None:
        parent, name = os.path.split(absolute)
        try:
            fd = open_confined(self.root, parent, os.O_RDONLY | os.O_DIRECTORY, aliases=self.aliases)
        except ConfinementError:
            raise
        except OSError as error:
            raise _ApplyFailure(message) from error
        try:
            os.unlink(name, dir_fd=fd)
        except OSError as error:
            raise _ApplyFailure(message) from error
        finally:
            os.close(fd)


class _ApplyFailure(Exception):
    """A file effect failed after verification: the patch ends with exit code 1 and this message."""
