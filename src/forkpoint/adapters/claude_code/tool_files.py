"""What Claude Code's file tools share within one session: paths as the tools see them, and per-file state.

Every rule here was measured on the real 2.1.220 / 2.1.332 binaries (scripted model); the tools themselves are in
``tool_read`` (Read) and ``tool_edit`` (Write, Edit), their text codecs in ``tool_codecs``.

- Relative paths resolve against the Bash shell's current directory, ``~`` against HOME; a path outside the
  workspace is refused before any effect, and so is a symlink that leads to a regular file outside it.
- Paths are the ones the tools see: under ``--sandbox bwrap`` the recorded cwd is the workspace (an alias the
  confined walk maps to the real workspace), so recorded absolute paths resolve unchanged.
- The session remembers what the model saw of each file (``FileState``, Claude's readFileState): Read, Write and
  Edit update it; Write and Edit consult it to refuse a file changed on disk since.
- A missing file is ``File does not exist. Note: your current working directory is <shell cwd>.`` (+ ``Did you
  mean <name>?`` for a sibling with the same stem); a FIFO, device or socket is a forkpoint tool error (Claude would
  block on it).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.adapters.claude_code.tool_profile import ToolOutcome, ToolProfile, tool_error
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import ConfinementError, open_confined
from forkpoint.sandbox import local_sandbox
from forkpoint.sandbox.base import inside_roots

if TYPE_CHECKING:
    from forkpoint.sandbox.base import Sandbox

_NODE_MESSAGES = {
    errno.EACCES: "permission denied",
    errno.ELOOP: "too many symbolic links encountered",
    errno.ENAMETOOLONG: "name too long",
    errno.EPERM: "operation not permitted",
}


@dataclass
class FileState:
    """What the session knows about one file (Claude's readFileState)."""

    text: str | None  # the content as last seen (CRLF -> LF), None when only part was scanned
    mtime_ns: int | None
    from_read: bool
    offset: int | None = None
    limit: int | None = None
    in_context: bool = True  # the model has seen the whole current content


def node_error(exc: OSError, path: str, syscall: str = "open") -> str:
    """The message of Node's failed fs call, as Claude reports it (``EACCES: permission denied, open '<path>'``)."""
    code = errno.errorcode.get(exc.errno or 0, "EIO")
    message = _NODE_MESSAGES.get(exc.errno or 0, (exc.strerror or str(exc)).lower())
    return f"{code}: {message}, {syscall} '{path}'"


class SessionFiles:
    """The files of one session as Claude's tools see them: path resolution, confined lookups, per-file state."""

    def __init__(
        self,
        workspace: Path,
        profile: ToolProfile,
        cwd: Callable[[], str],
        home: str | None,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.workspace = workspace
        # Paths are handled as the tools see them (under bwrap: the recorded cwd); only the fs calls and
        # metadata lookups go to the host, through the confined walk (which knows the alias) or host_path.
        self.sandbox = sandbox or local_sandbox(workspace)
        self.roots = self.sandbox.roots
        host_roots = (os.path.abspath(workspace), os.path.realpath(workspace))
        self.aliases = tuple(root for root in self.roots if root not in host_roots)
        self.host = self.sandbox.host_path
        self.profile = profile
        self.cwd = cwd
        self.home = home
        self.states: dict[str, FileState] = {}

    def path_arg(self, tool: str, arguments: dict[str, Any], name: str = "file_path") -> str:
        """The call's path argument; a call Claude itself would reject is refused before any effect."""
        value = arguments.get(name)
        if not isinstance(value, str) or not value or "\0" in value:
            raise ReplayError(
                ErrorKind.EXECUTOR, f"{tool} call has no usable {name}; Claude Code would reject it", before_effect=True
            )
        return value

    def resolve(self, tool: str, path: str) -> str:
        """The absolute path Claude would use (``~`` = HOME, relative = shell cwd); refused outside the workspace."""
        expanded = path
        if self.home is not None and (path == "~" or path.startswith("~/")):
            expanded = self.home + path[1:]
        return inside_roots(expanded, self.cwd(), self.roots,
                            f"Claude Code {tool} of {path!r} lies outside the workspace; forkpoint does not touch it")

    def escaped(self, tool: str, path: str, absolute: str) -> ToolOutcome:
        """A symlink led outside: a non-regular target is an ordinary tool error, a regular file a refusal."""
        try:
            target = os.stat(self.host(absolute))  # metadata only, nothing outside is opened
        except OSError:
            target = None
        if target is not None and stat.S_ISDIR(target.st_mode):
            return tool_error(f"EISDIR: illegal operation on a directory, read '{absolute}'")
        if target is not None and not stat.S_ISREG(target.st_mode):
            return self.not_regular(tool, absolute)
        raise ReplayError(
            ErrorKind.EXECUTOR,
            f"Claude Code {tool} of {path!r} resolves outside the workspace (symlink); forkpoint does not follow it",
            before_effect=True,
        )

    @staticmethod
    def not_regular(tool: str, absolute: str) -> ToolOutcome:
        """A FIFO, device or socket: Claude would block or read forever; forkpoint reports a tool error."""
        return tool_error(f"{tool} refused by forkpoint replay: {absolute} is not a regular file")

    def missing(self, absolute: str) -> str:
        """Claude's text for a file that does not exist (naming a sibling with the same stem, if any)."""
        message = f"File does not exist. Note: your current working directory is {self.cwd()}."
        similar = self._similar_name(absolute)
        return message + (f" Did you mean {similar}?" if similar else "")

    def _similar_name(self, absolute: str) -> str | None:
        directory, name = os.path.split(absolute)
        stem = os.path.splitext(name)[0]
        try:
            fd = open_confined(self.workspace, directory, os.O_RDONLY | os.O_DIRECTORY, aliases=self.aliases)
        except (OSError, ConfinementError):
            return None
        try:
            entries = os.listdir(fd)
        except OSError:
            return None
        finally:
            os.close(fd)
        return next((entry for entry in entries if entry != name and os.path.splitext(entry)[0] == stem), None)

    def mtime(self, absolute: str) -> int | None:
        """The file's mtime as the session records it, None when it cannot be stat'ed."""
        try:
            return os.stat(self.host(absolute)).st_mtime_ns
        except OSError:
            return None
