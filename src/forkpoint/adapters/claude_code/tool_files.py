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
  mean <name>?`` for a sibling with the same stem; 2.0.x: ``<tool_use_error>File does not exist.``); a FIFO,
  device or socket is a forkpoint tool error (Claude would block on it).
- A Read of a path outside the workspace (a screenshot under macOS's ``/var/folders/...`` in a recording made on a
  Mac) reads nothing on the host: whether the path exists is asked INSIDE the run's sandbox (``ls -d`` run there:
  metadata only, no file opened, the final link not followed). Absent there (no such file or directory, or a
  parent that is not one), the fresh observation is Claude's missing-file text, as the real binary in that
  sandbox would answer; anything else (it exists, a link, no permission) is refused before any effect, with
  ``--allow-stale-observations`` reusing the recorded observation. Under ``--sandbox bwrap`` the sandbox's view
  is the host's system tree with /tmp, /home, /root and $HOME hidden; under ``--sandbox local`` it is the host
  itself, so only a path the host does not have becomes the missing-file text (its content is never read).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.adapters.claude_code.tool_profile import ToolOutcome, ToolProfile, tool_error, tool_use_error
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import ConfinementError, open_confined
from forkpoint.process import sanitized_env
from forkpoint.sandbox import local_sandbox
from forkpoint.sandbox.base import inside_roots, within

if TYPE_CHECKING:
    from forkpoint.sandbox.base import Sandbox

#: the existence probe of a path outside the workspace, run inside the sandbox (``ls -d``: an lstat, nothing opened)
_PROBE_TIMEOUT_S = 60.0
#: ls's own diagnosis (exit 2, ``ls: cannot access '<path>': <strerror>``, LC_ALL=C); the END of the line is read, so
#: a path that spells one of these texts itself decides nothing
_ABSENT = (b": No such file or directory\n", b": Not a directory\n")

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
        return inside_roots(self.expand(path), self.cwd(), self.roots,
                            f"Claude Code {tool} of {path!r} lies outside the workspace; forkpoint does not touch it")

    def expand(self, path: str) -> str:
        if self.home is not None and (path == "~" or path.startswith("~/")):
            return self.home + path[1:]
        return path

    def outside(self, path: str) -> str | None:
        """The absolute path (as the tools see it) when ``path`` lies outside every spelling of the workspace."""
        absolute = os.path.normpath(os.path.join(self.cwd(), self.expand(path)))
        return None if any(within(absolute, root) for root in self.roots) else absolute

    def absent_outside(self, tool: str, path: str, absolute: str) -> ToolOutcome:
        """Claude's missing-file answer for a path outside the workspace that the sandbox does not have; any other
        case is refused before any effect (stale fallback): forkpoint reads no file outside the workspace."""
        env = sanitized_env(os.environ, strip_credentials=True)
        env.update({"LC_ALL": "C", "LANG": "C"})
        try:
            result = self.sandbox.run(["ls", "-d", "--", absolute], cwd=self.sandbox.cwd, env=env,
                                      timeout_s=_PROBE_TIMEOUT_S)
        except (OSError, ReplayError) as error:
            detail = getattr(error, "message", None) or str(error)
            raise ReplayError(ErrorKind.EXECUTOR, f"Claude Code {tool} of {path!r} (outside the workspace): its "
                                                  f"existence probe failed ({detail})", before_effect=True) from None
        if result.returncode == 2 and result.stderr.startswith(b"ls: cannot access ") \
                and result.stderr.endswith(_ABSENT) and result.stderr.count(b"\n") == 1:
            return self.missing_outcome(absolute)
        raise ReplayError(
            ErrorKind.EXECUTOR,
            f"Claude Code {tool} of {path!r} lies outside the workspace and the sandbox ({self.sandbox.name}) does "
            "not say it is absent; forkpoint reads no file outside the workspace (--allow-stale-observations reuses "
            "the recorded observation)",
            before_effect=True, stale_fallback=True,
        )

    def missing_outcome(self, absolute: str) -> ToolOutcome:
        """Read's answer for a missing file, in the profile's form."""
        if self.profile.read_missing_short:
            similar = self._similar_name(absolute)
            return tool_use_error("File does not exist." + (f" Did you mean {similar}?" if similar else ""))
        return tool_error(self.missing(absolute))

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
