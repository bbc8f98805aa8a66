"""``--sandbox bwrap``: bubblewrap (Debian package ``bubblewrap``) mounts the workspace at the recorded cwd.

Every command (each replayed Bash call, and the continued agent) runs in a fresh mount namespace built from
these bwrap arguments, in this order (later mounts cover earlier ones); Claude Code's and Codex's replayed commands
share one such sandbox per replay (``executor``: ``forkpoint.sandbox.executor``):

1. The root is bwrap's own tmpfs, re-populated with read-only binds of the host's top-level entries
   (``--ro-bind /usr /usr``, ``--symlink usr/bin /bin``, ...), a fresh ``--proc /proc`` and ``--dev /dev``.
   A skeleton rather than ``--ro-bind / /`` so that a recorded cwd whose parents do not exist on this host
   (``/testbed``, ``/Users/alice/proj``, ``/workspace``) can still be created; when the missing part starts
   deeper (``/srv/absent/app``), the deepest existing directory gets the same skeleton (a tmpfs with its
   entries bound back read-only). Every skeleton is remounted read-only at the end (``--remount-ro``).
   Where the skeleton is not needed (the recorded cwd exists here or lies in a hidden tmpfs, every hidden
   directory exists here, and the top level holds nothing the skeleton would leave out), the root is one
   ``--ro-bind / /``: the same view, ~2 ms less per command (each bind is a mount paid on every command; issue 33).
2. Hidden behind empty tmpfs mounts: ``/tmp`` and ``/var/tmp`` (private temp dirs), ``/home``, ``/root``, the
   user's real ``$HOME`` and ``$XDG_RUNTIME_DIR`` / ``/run/user`` (dotfiles, credentials, agent configs, agent
   sockets): neither readable nor writable inside. ``TMPDIR`` is set to that private ``/tmp`` (the host's, or the
   run's own temp folder, is not visible inside).
3. ``--bind WORKSPACE RECORDED_CWD``: the workspace, read-write, at the recorded path (after the /tmp tmpfs,
   since recordings often live under /tmp). Then the caller's ``writable`` host paths (the agent's isolated
   HOME under the state dir, a scratch dir) read-write at the same path, and ``readable`` ones (the agent's
   runtime) read-only.
4. ``--cap-drop ALL`` (as root bwrap would otherwise keep every capability, and ``mount -o remount,rw`` would
   undo the read-only binds), ``--unshare-pid`` (the command's processes die with the namespace's init, which
   also dies with bwrap: ``--die-with-parent``; the supervisor still sees and reaps them through /proc),
   ``--unshare-ipc``, and ``--unshare-net`` unless ``network=True``: tool replay has only a loopback interface
   of its own, so nothing on the host (not even 127.0.0.1) or beyond is reachable. The continued agent runs the
   same way (``private_network``), with only the bridge's port relayed into its namespace
   (``forkpoint.sandbox.forward``), so its live tool calls reach nothing else either.

Not used: ``--new-session`` (the supervisor already starts every command in a new session without a controlling
terminal, so TIOCSTI has nothing to inject into, and keeping bwrap's child in the supervised session keeps
``killpg`` effective), ``--unshare-user`` (not needed once capabilities are dropped).
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from forkpoint.core.errors import ErrorKind, ReplayError, configuration
from forkpoint.process import run_supervised, sanitized_env
from forkpoint.sandbox.base import PathMap, Sandbox, within

if TYPE_CHECKING:
    from forkpoint.sandbox.executor import CommandExecutor

#: Never the recorded cwd (nor one of its descendants, for the kernel file systems).
_SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/proc", "/run", "/sbin",
                "/sys", "/usr", "/var")
_KERNEL_DIRS = ("/dev", "/proc", "/sys")
_HIDDEN_TOP = ("/tmp", "/home", "/root")
_HIDDEN_NESTED = ("/var/tmp", "/run/user")
_PROBE_TIMEOUT_S = 60.0  # a loaded machine (issue 27: probes get deadlines that fit one)


def install_hint() -> str:
    return "install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) or use --sandbox local"


def namespaces(cwd: str, network: bool, env: Mapping[str, str] = MappingProxyType({})) -> list[str]:
    """The end of every bwrap argv (after the mounts): the working dir, no capabilities, its own pid and ipc (and,
    without ``network``, net) namespaces, dying with forkpoint, ``env`` and TMPDIR set, then ``--``."""
    args = ["--chdir", cwd, "--cap-drop", "ALL", "--unshare-pid", "--unshare-ipc", "--die-with-parent"]
    for name, value in sorted(env.items()):
        args += ["--setenv", name, value]
    args += ["--setenv", "TMPDIR", "/tmp"]  # the host's TMPDIR is hidden; the sandbox's /tmp is its own
    if not network:
        args.append("--unshare-net")
    args.append("--")
    return args


class BwrapSandbox(Sandbox):
    name = "bwrap"
    private_network = True

    def __init__(
        self,
        workspace: Path,
        recorded_cwd: str | None = None,
        path_map: PathMap | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        if path_map:
            raise configuration("--path-map is for --sandbox local; --sandbox bwrap mounts the workspace at the "
                                "recorded path, so recorded paths need no rewriting")
        self.workspace = Path(os.path.abspath(workspace))
        self.recorded_cwd = recorded_cwd
        root = os.path.normpath(recorded_cwd) if recorded_cwd is not None else str(self.workspace)
        env = os.environ if environ is None else environ
        self.hidden = _hidden_dirs(env)
        _check_recorded(root, self.hidden)
        self.cwd = root
        self.roots: tuple[str, ...] = (root,)
        self.path_map = PathMap()
        self.path_rewrites: list[dict[str, Any]] = []
        self.path_restores: list[dict[str, Any]] = []
        self.executable = _find_bwrap()
        self._probe()

    # ------------------------------------------------------------------ paths

    def host_path(self, path: str) -> str:
        if within(path, self.cwd):
            return str(self.workspace) + path[len(self.cwd.rstrip("/")) :] if self.cwd != "/" else path
        return path

    # ------------------------------------------------------------------ running

    def arguments(
        self, cwd: str, *, network: bool, writable: Sequence[Path] = (), readable: Sequence[Path] = ()
    ) -> list[str]:
        """The bwrap argv up to and including ``--`` (see the module docstring for the order and reasons)."""
        if _root_bind_fits(self.cwd, self.hidden):  # the cheap form (about 2 ms less per command; issue 33)
            args = [self.executable, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
            for path in self.hidden:
                args += ["--tmpfs", path]
            return [*args, *self._tail(cwd, network, writable, readable, remount=())]
        args = [self.executable, *_skeleton("/", self.hidden)]
        skeleton = _missing_parent_skeleton(self.cwd, self.hidden)
        if skeleton is not None:
            args += ["--tmpfs", skeleton, *_skeleton(skeleton, self.hidden)]
        for path in self.hidden:  # the ones the skeletons did not cover (nested, or absent on this host)
            if os.path.dirname(path) not in ("/", skeleton) or not os.path.isdir(path):
                args += ["--tmpfs", path]
        remount = ("/",) if skeleton is None else (skeleton, "/")
        return [*args, *self._tail(cwd, network, writable, readable, remount=remount)]

    def _tail(
        self, cwd: str, network: bool, writable: Sequence[Path], readable: Sequence[Path], *, remount: Sequence[str]
    ) -> list[str]:
        """The workspace and the extras (after the hidden tmpfs mounts), the skeletons' read-only remounts (after
        the binds whose mount points bwrap creates in them), the namespaces and ``--``."""
        args = ["--bind", str(self.workspace), self.cwd]
        for extra in writable:
            args += ["--bind", str(extra), str(extra)]
        for extra in readable:
            args += ["--ro-bind-try", str(extra), str(extra)]
        for path in remount:
            args += ["--remount-ro", path]
        return [*args, *namespaces(cwd, network)]

    def confine(
        self, argv: Sequence[str], cwd: str, *, network: bool, writable: Sequence[Path], readable: Sequence[Path]
    ) -> tuple[list[str], Path]:
        for path in writable:
            path.mkdir(parents=True, exist_ok=True)
        if not self.workspace.is_dir():
            raise ReplayError(ErrorKind.WORKSPACE, f"workspace {self.workspace} is not a directory")
        command = [*self.arguments(cwd, network=network, writable=writable, readable=readable), *argv]
        host_cwd = self.host_path(cwd)
        return command, Path(host_cwd if os.path.isdir(host_cwd) else "/")

    def executor(self) -> CommandExecutor:
        """One bwrap for all of one replay's commands (``forkpoint.sandbox.executor``); ``FORKPOINT_SANDBOX_EXECUTOR=
        per-command`` gives each command its own, as before (for comparisons)."""
        from forkpoint.sandbox.executor import MODE_ENV, CommandExecutor, SandboxExecutor

        if os.environ.get(MODE_ENV) == "per-command":
            return CommandExecutor(self)
        return SandboxExecutor(self)

    def _probe(self) -> None:
        """Refuse up front when this host cannot create the sandbox (no user namespaces, seccomp, ...)."""
        command = [self.executable, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev", "--cap-drop", "ALL",
                   "--unshare-pid", "--unshare-ipc", "--unshare-net", "--die-with-parent", "--", "/bin/true"]
        result = run_supervised(command, cwd=Path("/"), env=sanitized_env(os.environ, strip_credentials=True),
                                timeout_s=_PROBE_TIMEOUT_S)
        if result.returncode != 0:
            detail = result.stderr.decode("utf-8", "replace").strip()[-500:] or f"exit code {result.returncode}"
            raise configuration(f"--sandbox bwrap: bubblewrap cannot create a sandbox on this host ({detail}); "
                                "it needs unprivileged user namespaces or root, or use --sandbox local")

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "isolation": "bubblewrap",
            "bwrap": self.executable,
            "workspace": str(self.workspace),
            "agent_cwd": self.cwd,
            "recorded_cwd": self.recorded_cwd,
            "hidden": list(self.hidden),
            "network_during_tool_replay": "none (--unshare-net)",
            "replayed_commands": "Claude Code's Bash, Codex's exec_command / shell_command / shell and process "
                                 "sessions: one sandbox per replay, shared by its commands (/tmp, /var/tmp, loopback, "
                                 "IPC; whatever a command started is killed when it ends)",
            "network_during_continuation": "only the bridge (--unshare-net; 127.0.0.1:<bridge port> inside is "
                                           "relayed to the bridge over a Unix socket)",
            "path_map": [],
        }


def _find_bwrap() -> str:
    found = shutil.which("bwrap")
    if found is None:
        raise configuration(f"--sandbox bwrap: `bwrap` was not found on PATH; {install_hint()}")
    return found


def _check_recorded(root: str, hidden: Sequence[str]) -> None:
    if not os.path.isabs(root):
        raise ReplayError(ErrorKind.WORKSPACE, f"the recorded cwd {root!r} is not an absolute path")
    if root == "/" or any(within(system, root) for system in _SYSTEM_DIRS) or any(
        within(root, kernel) for kernel in _KERNEL_DIRS
    ):
        raise ReplayError(ErrorKind.WORKSPACE, f"--sandbox bwrap will not mount the workspace at the recorded cwd "
                                               f"{root}: it would hide system directories")
    probe = root
    while probe != "/":
        if any(within(probe, tmpfs) for tmpfs in hidden):  # a fresh tmpfs inside: the host's tree does not matter
            probe = os.path.dirname(probe)
            continue
        if os.path.islink(probe):
            raise ReplayError(ErrorKind.WORKSPACE, f"the recorded cwd {root} passes through the symlink {probe} on "
                                                   "this host; bwrap cannot mount the workspace there")
        if os.path.exists(probe) and not os.path.isdir(probe):
            raise ReplayError(ErrorKind.WORKSPACE, f"the recorded cwd {root} cannot be mounted: {probe} is not a "
                                                   "directory on this host")
        probe = os.path.dirname(probe)


def _hidden_dirs(environ: Mapping[str, str]) -> tuple[str, ...]:
    candidates = [*_HIDDEN_TOP, *_HIDDEN_NESTED]
    for name in ("HOME", "XDG_RUNTIME_DIR"):
        value = environ.get(name)
        if value and os.path.isabs(value):
            candidates += [os.path.normpath(value), os.path.realpath(value)]
    hidden: list[str] = []
    for path in candidates:
        if path == "/" or any(within(system, path) for system in _SYSTEM_DIRS):
            continue  # never hide a system directory (a HOME of "/" or "/var")
        if path in _HIDDEN_TOP or (os.path.isdir(path) and not os.path.islink(path)):
            hidden.append(path)
    # Keep only the outermost: a tmpfs on /home already hides /home/alice.
    outer = [path for path in dict.fromkeys(hidden)
             if not any(other != path and within(path, other) for other in hidden)]
    return tuple(sorted(outer, key=lambda path: (path.count("/"), path)))


def _entries(directory: str) -> Iterable[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as scan:
            return sorted(scan, key=lambda entry: entry.name)
    except OSError:
        return []


def _skeleton(directory: str, hidden: Sequence[str]) -> list[str]:
    """Bind ``directory``'s host entries back read-only into a fresh tmpfs (or bwrap's root); hidden ones get a
    tmpfs of their own, kernel file systems a fresh instance."""
    args: list[str] = []
    for entry in _entries(directory):
        path = os.path.join(directory, entry.name)
        if path == "/proc":
            args += ["--proc", "/proc"]
        elif path == "/dev":
            args += ["--dev", "/dev"]
        elif path in hidden:
            args += ["--tmpfs", path]
        elif entry.is_symlink():
            args += ["--symlink", os.readlink(path), path]
        else:
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
                args += ["--ro-bind", path, path]
    return args


def _root_bind_fits(root: str, hidden: Sequence[str]) -> bool:
    """Whether ``--ro-bind / /`` shows exactly what the root skeleton would, so one recursive bind can replace a
    tmpfs with a bind per top-level entry: the recorded cwd needs no directory created outside a hidden tmpfs
    (it exists here, or lies in one), every hidden directory exists here (a mount point for its tmpfs in the
    read-only root), and the top level holds only directories, regular files and symlinks (the skeleton leaves
    out a socket or device there; the whole-root bind would not)."""
    if not any(within(root, tmpfs) for tmpfs in hidden) and not os.path.isdir(root):
        return False
    if not all(os.path.isdir(path) and not os.path.islink(path) for path in hidden):
        return False
    for entry in _entries("/"):
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            return False
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
            return False
    return True


def _missing_parent_skeleton(root: str, hidden: Sequence[str]) -> str | None:
    """The deepest existing ancestor of ``root`` that needs a skeleton so ``root`` can be created, if any."""
    probe = root
    while True:
        if any(within(probe, tmpfs) for tmpfs in hidden):
            return None  # inside a tmpfs: bwrap creates the missing directories itself
        if os.path.isdir(probe):
            return None if probe in (root, "/") else probe
        probe = os.path.dirname(probe)
