"""The fresh workspace: its inventory hash (recorded before replay) and ``--workspace-from`` (create it first).

Inventory: every entry below the workspace root (nothing skipped: ``.git``, caches and dotfiles included),
sorted by the bytes of its relative path, one canonical JSON object per entry:

- ``{"path", "type": "dir"}``
- ``{"path", "type": "file", "size", "sha256", "executable"}`` (``executable``: any x bit)
- ``{"path", "type": "symlink", "target"}`` (never followed)
- ``{"path", "type": "fifo" | "socket" | "char_device" | "block_device" | "other"}`` (never opened)
- an entry that cannot be read carries ``"error": "<errno name>"`` instead of its digest, and is listed in
  ``unreadable`` (the metadata says so: nothing is left out silently).

A path that is not valid UTF-8 is given as ``path_hex`` instead. ``sha256`` is the SHA-256 of the entries, each
encoded as canonical JSON followed by ``\\n``. Two workspaces with the same inventory hash have the same tree,
contents, symlinks and executable bits (owners, times and other mode bits are not part of it).

``--workspace-from`` creates the workspace (which must be absent or an empty directory) from:

- a directory: ``cp --reflink=auto -a SRC/. WORKSPACE`` (copy-on-write clones where the file system can);
- a tarball (any compression ``tarfile`` reads): every member is checked first, and an absolute name, a ``..``
  component, a hard link leading outside or a device node refuses the whole archive before anything is
  written; extraction then uses tarfile's ``tar`` filter (no path may land outside the workspace, even
  through a symlink extracted earlier);
- ``GIT_URL@REV``: ``git clone`` then ``git checkout --detach REV`` (the resolved commit is recorded).
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from forkpoint.core.errors import ErrorKind, ReplayError, configuration
from forkpoint.core.hashing import canonical_json
from forkpoint.process import run_supervised, sanitized_env

INVENTORY_SCHEMA = "forkpoint.workspace-inventory/v1"
CREATE_TIMEOUT_S = 3600.0
_REV = re.compile(r"[A-Za-z0-9._/^~+-]+")


@dataclass(frozen=True)
class Inventory:
    sha256: str
    files: int
    entries: int
    unreadable: tuple[str, ...] = ()

    def to_metadata(self) -> dict[str, Any]:
        return {
            "workspace_inventory_sha256": self.sha256,
            "workspace_inventory_files": self.files,
            "workspace_inventory_entries": self.entries,
            "workspace_inventory_unreadable": list(self.unreadable),
            "workspace_inventory_schema": INVENTORY_SCHEMA,
        }


def _errno_name(exc: OSError) -> str:
    return errno.errorcode.get(exc.errno or 0, "EIO")


def _shown(relative: bytes) -> dict[str, str]:
    try:
        return {"path": relative.decode("utf-8")}
    except UnicodeDecodeError:
        return {"path_hex": relative.hex()}


def _file_entry(dir_fd: int, name: bytes, st: os.stat_result) -> dict[str, Any]:
    entry: dict[str, Any] = {"type": "file", "size": st.st_size, "executable": bool(st.st_mode & 0o111)}
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY, dir_fd=dir_fd)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the lstat: report what is there now
            raise OSError(errno.EAGAIN, "changed while hashed")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            digest = hashlib.file_digest(handle, "sha256")
    finally:
        os.close(fd)
    entry["sha256"] = digest.hexdigest()
    return entry


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_below(base_fd: int, relative: bytes) -> int:
    """A directory below the root, every component opened with O_NOFOLLOW: a folder swapped for a symlink
    since it was listed is an error (ELOOP / ENOTDIR), never a walk outside the workspace."""
    fd = os.dup(base_fd)
    try:
        for part in relative.split(b"/"):
            child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def inventory(root: Path) -> Inventory:
    """Hash the workspace tree (see the module docstring); never follows a symlink, never opens a special file."""
    return inventory_of(tree_entries(root))


def inventory_of(entries: list[tuple[bytes, dict[str, Any]]]) -> Inventory:
    """The inventory of a tree's entries (as :func:`tree_entries` gives them, sorted by path)."""
    digest = hashlib.sha256()
    files = 0
    unreadable: list[str] = []
    for relative, entry in entries:
        document = {**_shown(relative), **entry}
        digest.update(canonical_json(document).encode("utf-8") + b"\n")
        files += entry["type"] == "file"
        if "error" in entry:
            unreadable.append(os.fsdecode(relative))
    return Inventory(digest.hexdigest(), files, len(entries), tuple(unreadable))


def tree_entries(root: Path) -> list[tuple[bytes, dict[str, Any]]]:
    """Every entry under ``root`` (relative path, {type, size, sha256 | symlink target | error}), sorted by path;
    never follows a symlink, never opens a special file.

    Replayed commands write the workspace: every directory is opened relative to its parent's fd with
    ``O_NOFOLLOW`` and every entry is looked at through that fd, so nothing outside the tree is listed or read.
    """
    try:
        base_fd = os.open(os.path.abspath(root), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise ReplayError(ErrorKind.WORKSPACE, f"cannot list the workspace {root}: {exc.strerror}") from None
    collected: list[tuple[bytes, dict[str, Any]]] = []
    pending = [b""]
    try:
        while pending:
            relative_dir = pending.pop()
            try:
                dir_fd = _open_below(base_fd, relative_dir) if relative_dir else os.dup(base_fd)
                try:
                    names = [os.fsencode(name) for name in os.listdir(dir_fd)]
                except BaseException:
                    os.close(dir_fd)
                    raise
            except OSError as exc:
                if not relative_dir:
                    raise ReplayError(ErrorKind.WORKSPACE,
                                      f"cannot list the workspace {root}: {exc.strerror}") from None
                collected.append((relative_dir, {"type": "dir", "error": _errno_name(exc)}))
                continue
            try:
                for name in names:
                    relative = os.path.join(relative_dir, name) if relative_dir else name
                    _collect(dir_fd, name, relative, collected, pending)
            finally:
                os.close(dir_fd)
    finally:
        os.close(base_fd)
    collected.sort(key=lambda item: item[0])
    return collected


def _collect(dir_fd: int, name: bytes, relative: bytes, collected: list[tuple[bytes, dict[str, Any]]],
             pending: list[bytes]) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError as exc:
        collected.append((relative, {"type": "other", "error": _errno_name(exc)}))
        return
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        collected.append((relative, {"type": "dir"}))
        pending.append(relative)
    elif stat.S_ISLNK(mode):
        try:
            target = os.readlink(name, dir_fd=dir_fd)
        except OSError as exc:
            collected.append((relative, {"type": "symlink", "error": _errno_name(exc)}))
        else:
            collected.append((relative, {"type": "symlink", **target_entry(target)}))
    elif stat.S_ISREG(mode):
        try:
            collected.append((relative, _file_entry(dir_fd, name, st)))
        except OSError as exc:
            collected.append((relative, {"type": "file", "size": st.st_size, "error": _errno_name(exc)}))
    else:
        collected.append((relative, {"type": special_type(mode)}))


def target_entry(target: bytes) -> dict[str, str]:
    try:
        return {"target": target.decode("utf-8")}
    except UnicodeDecodeError:
        return {"target_hex": target.hex()}


def special_type(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "char_device"
    if stat.S_ISBLK(mode):
        return "block_device"
    return "other"


# --------------------------------------------------------------------------------------------- --workspace-from


@dataclass(frozen=True)
class WorkspaceSource:
    kind: str  # dir | tarball | git
    location: str
    rev: str | None = None

    def to_metadata(self) -> dict[str, Any]:
        return {"kind": self.kind, "source": self.location, "rev": self.rev}


def parse_source(spec: str) -> WorkspaceSource:
    """DIR | TARBALL | GIT_URL@REV, checked without side effects."""
    if not spec:
        raise configuration("workspace_from must not be empty")
    path = Path(spec)
    if path.is_dir():
        return WorkspaceSource("dir", str(path.absolute()))
    if path.is_file():
        if not tarfile.is_tarfile(path):
            raise configuration(f"--workspace-from {spec}: a file must be a tar archive (.tar, .tar.gz, ...)")
        check_tarball(path)
        return WorkspaceSource("tarball", str(path.absolute()))
    url, at, rev = spec.rpartition("@")
    if at and url and rev and _REV.fullmatch(rev) and not rev.startswith("-") and not url.startswith("-"):
        local = Path(url)
        if local.exists() or not _looks_remote(url):
            if not local.exists():
                raise configuration(f"--workspace-from {spec}: {url} does not exist")
            url = str(local.absolute())
        return WorkspaceSource("git", url, rev)
    raise configuration(f"--workspace-from {spec!r} is not an existing directory, a tar archive, or GIT_URL@REV")


def _looks_remote(url: str) -> bool:
    return "://" in url or re.match(r"^[\w.-]+@[\w.-]+:", url) is not None


def check_target(workspace: Path) -> None:
    """``--workspace-from`` never writes into an existing non-empty directory."""
    if workspace.is_symlink() or (workspace.exists() and not workspace.is_dir()):
        raise ReplayError(ErrorKind.WORKSPACE, f"--workspace-from: {workspace} exists and is not a directory")
    if workspace.is_dir() and any(workspace.iterdir()):
        raise ReplayError(ErrorKind.WORKSPACE, f"--workspace-from refuses to fill the non-empty directory "
                                               f"{workspace}; give a new or empty --workspace")


def create(source: WorkspaceSource, workspace: Path) -> dict[str, Any]:
    """Create the workspace from its source; returns metadata (the resolved git commit, ...). An existing (empty)
    directory keeps its own mode: ``cp -a SRC/.`` and a tarball's ``.`` member would give it the source's (a
    private 0700 folder would become 0755)."""
    check_target(workspace)
    kept_mode = stat.S_IMODE(os.stat(workspace).st_mode) if workspace.is_dir() else None
    workspace.mkdir(parents=True, exist_ok=True)
    try:
        if source.kind == "dir":
            copy_tree(Path(source.location), workspace)
            return source.to_metadata()
        if source.kind == "tarball":
            count = extract_tarball(Path(source.location), workspace)
            return {**source.to_metadata(), "members": count}
        commit = _git_checkout(source.location, source.rev or "", workspace)
        return {**source.to_metadata(), "commit": commit}
    finally:
        if kept_mode is not None:
            os.chmod(workspace, kept_mode)


def copy_tree(source: Path, workspace: Path) -> None:
    """Copy a directory tree into ``workspace`` (`cp --reflink=auto -a`: a reflink where the file system has them)."""
    src, dest = source.resolve(), workspace.resolve()
    if dest == src or src in dest.parents:
        raise ReplayError(ErrorKind.WORKSPACE, f"--workspace-from {source}: the workspace {workspace} lies inside it")
    cp = shutil.which("cp")
    if cp is None:
        shutil.copytree(src, dest, symlinks=True, dirs_exist_ok=True)
        return
    result = run_supervised([cp, "--reflink=auto", "-a", "--", f"{src}/.", f"{dest}/"], cwd=Path("/"),
                            env=sanitized_env(os.environ, strip_credentials=True), timeout_s=CREATE_TIMEOUT_S)
    if result.returncode != 0 or result.timed_out:
        detail = result.stderr.decode("utf-8", "replace").strip()[-500:]
        raise ReplayError(ErrorKind.WORKSPACE, f"copy {source} to {workspace} failed: {detail}")


def _unsafe_member(member: tarfile.TarInfo) -> str | None:
    def escapes(name: str) -> bool:
        pure = PurePosixPath(name)
        return pure.is_absolute() or ".." in pure.parts

    if not member.name or escapes(member.name):
        return f"{member.name!r} would be written outside the workspace"
    if member.islnk() and escapes(member.linkname):
        return f"hard link {member.name!r} -> {member.linkname!r} leads outside the workspace"
    if member.ischr() or member.isblk():
        return f"{member.name!r} is a device node"
    return None


def _checked_members(tar: tarfile.TarFile, archive: Path) -> list[tarfile.TarInfo]:
    members = tar.getmembers()
    for member in members:
        problem = _unsafe_member(member)
        if problem is not None:
            raise ReplayError(ErrorKind.WORKSPACE, f"--workspace-from {archive}: refused: {problem}")
    return members


def check_tarball(archive: Path) -> None:
    """Refuse an archive with an unsafe member before anything is created (checked again when extracting)."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            _checked_members(tar, archive)
    except (tarfile.TarError, OSError) as exc:
        raise ReplayError(ErrorKind.WORKSPACE, f"--workspace-from {archive}: cannot read: {exc}") from None


def extract_tarball(archive: Path, workspace: Path) -> int:
    """Check every member, then extract (nothing is written when any member is unsafe)."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = _checked_members(tar, archive)
            tar.extractall(workspace, members=members, filter="tar")
    except (tarfile.TarError, OSError) as exc:
        raise ReplayError(ErrorKind.WORKSPACE, f"--workspace-from {archive}: cannot extract: {exc}") from None
    return len(members)


def _git_checkout(url: str, rev: str, workspace: Path) -> str:
    env = sanitized_env(os.environ, strip_credentials=False)
    env.update({"GIT_TERMINAL_PROMPT": "0", "GIT_ADVICE": "0"})

    def git(*args: str) -> str:
        result = run_supervised(["git", *args], cwd=workspace, env=env, timeout_s=CREATE_TIMEOUT_S)
        if result.returncode != 0 or result.timed_out:
            detail = result.stderr.decode("utf-8", "replace").strip()[-500:]
            raise ReplayError(ErrorKind.WORKSPACE, f"--workspace-from {url}@{rev}: git {args[0]} failed: {detail}")
        return result.stdout.decode("utf-8", "replace").strip()

    if shutil.which("git") is None:
        raise ReplayError(ErrorKind.WORKSPACE, "--workspace-from GIT_URL@REV needs git on PATH")
    git("clone", "--quiet", "--no-checkout", "--", url, str(workspace))
    git("checkout", "--quiet", "--detach", rev, "--")
    return git("rev-parse", "HEAD")
