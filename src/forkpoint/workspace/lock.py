"""One run per workspace: an exclusive lock keyed by the workspace directory, held for the run's whole life.

Two replays into one workspace would each re-run their tools there and mix (double) their effects, while each
reports a verified run. The run-id lock (``run.lock`` in the state dir) cannot see this: two runs may use different
run ids and different state roots. So every run that executes anything (replay-only and replay+continue; never
prepare-only) takes ``flock(LOCK_EX | LOCK_NB)`` on a lock file named after the workspace's identity, and the second
run is refused (``workspace_error``, exit 20) naming the holder's run id and pid.

Where: a private per-user directory OUTSIDE the workspace (its inventory stays unchanged), ``$FORKPOINT_LOCK_DIR`` or
``/tmp/forkpoint-locks-<uid>`` — a fixed path rather than ``$XDG_RUNTIME_DIR`` or the state root, so that every run of
the user agrees on it whatever its environment or ``--state-dir``. The file is named by the SHA-256 of the
workspace's device and inode, so every path to the same directory (a symlink, a bind mount, ``..``) meets the same
lock. Another user could pre-create that directory in ``/tmp``: it is used only when it is a real directory (never a
symlink) owned by us with no group/other access, and the lock file is opened with ``O_NOFOLLOW`` and must be a
regular file of ours — else the run is refused, nothing is written through it.

The lock file holds the holder's ``{"run_id", "pid", "workspace", "since"}`` for the refusal message, and is unlinked
by its holder before the lock is released; a waiter that opened the file just before that unlink notices (the name no
longer points at the inode it locked) and tries again on a fresh file, so exactly one run holds the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import stat
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Final

import orjson

from forkpoint.core.errors import ErrorKind, ReplayError, configuration

LOCK_DIR_ENV: Final = "FORKPOINT_LOCK_DIR"
MAX_HOLDER_BYTES: Final = 4096
_ATTEMPTS: Final = 20


def lock_dir() -> Path:
    """The per-user lock directory (see the module doc)."""
    return Path(os.environ.get(LOCK_DIR_ENV) or f"/tmp/forkpoint-locks-{os.geteuid()}")


def lock_key(identity: os.stat_result) -> str:
    """The lock file's name for a workspace directory: the SHA-256 of its device and inode (what a run records of
    its workspace, so that `forkpoint continue` can tell it is still the same directory)."""
    return hashlib.sha256(f"{identity.st_dev}:{identity.st_ino}".encode()).hexdigest() + ".lock"


class WorkspaceLock:
    """A held workspace lock; :meth:`release` (or leaving the ``with`` block) unlinks its file and frees it."""

    def __init__(self, dir_fd: int, fd: int, name: str) -> None:
        self._dir_fd: int | None = dir_fd
        self._fd: int | None = fd
        self.name = name

    def release(self) -> None:
        """Unlink the lock file while still holding it, then release; idempotent."""
        fd, self._fd = self._fd, None
        dir_fd, self._dir_fd = self._dir_fd, None
        try:
            if fd is not None and dir_fd is not None:
                with contextlib.suppress(OSError):
                    if _same_file(os.fstat(fd), os.stat(self.name, dir_fd=dir_fd, follow_symlinks=False)):
                        os.unlink(self.name, dir_fd=dir_fd)
        finally:
            if fd is not None:
                os.close(fd)  # closing the only descriptor releases the flock
            if dir_fd is not None:
                os.close(dir_fd)

    def __enter__(self) -> WorkspaceLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self.release()


def lock_workspace(workspace: Path, run_id: str, *, create: bool = False) -> WorkspaceLock:
    """Take the workspace's exclusive lock for ``run_id`` or refuse (``workspace_error``) naming the holder.

    ``create``: make the (absent) directory first (``--workspace-from``), so the lock has an inode to name; the
    creation step then re-checks that it is still empty, under the lock.
    """
    try:
        if create:
            workspace.mkdir(parents=True, exist_ok=True)
        identity = os.stat(workspace)
    except OSError as exc:
        raise ReplayError(ErrorKind.WORKSPACE, f"cannot lock the workspace {workspace}: {exc.strerror}") from None
    if not stat.S_ISDIR(identity.st_mode):
        raise ReplayError(ErrorKind.WORKSPACE, f"workspace is not a directory: {workspace}")
    name = lock_key(identity)
    dir_fd = _open_lock_dir(lock_dir())
    try:
        for _ in range(_ATTEMPTS):
            fd = _open_lock_file(dir_fd, name)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = read_holder(fd)
                os.close(fd)
                raise ReplayError(ErrorKind.WORKSPACE, _refusal(workspace, holder)) from None
            except BaseException:
                os.close(fd)
                raise
            try:
                current = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            if current is None or not _same_file(os.fstat(fd), current):  # unlinked by its releasing holder
                os.close(fd)
                continue
            _write_holder(fd, workspace, run_id)
            return WorkspaceLock(dir_fd, fd, name)
        raise ReplayError(ErrorKind.WORKSPACE, f"cannot lock the workspace {workspace}: its lock file kept changing")
    except BaseException:
        os.close(dir_fd)
        raise


def _open_lock_dir(directory: Path) -> int:
    """The private lock directory, created 0700 if missing; anything else at that path is refused, never used."""
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass  # checked below: ours, private, not a symlink
    except OSError as exc:
        raise configuration(f"cannot create the workspace lock directory {directory}: {exc.strerror}; "
                            f"set {LOCK_DIR_ENV} to a private directory") from None
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise configuration(f"the workspace lock directory {directory} is not a directory ({exc.strerror}); "
                            f"remove it or set {LOCK_DIR_ENV}") from None
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o077:
        os.close(fd)
        raise configuration(f"the workspace lock directory {directory} is not private to you (owner uid "
                            f"{info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}); remove it or set {LOCK_DIR_ENV}")
    return fd


def _open_lock_file(dir_fd: int, name: str) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
    try:
        fd = os.open(name, flags, 0o600, dir_fd=dir_fd)
    except OSError as exc:
        raise ReplayError(ErrorKind.WORKSPACE, f"cannot open the workspace lock {name}: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise ReplayError(ErrorKind.WORKSPACE, f"the workspace lock {name} is not a regular file of yours")
    return fd


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _write_holder(fd: int, workspace: Path, run_id: str) -> None:
    since = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    record = orjson.dumps({"run_id": run_id, "pid": os.getpid(), "workspace": os.path.realpath(workspace),
                           "since": since})
    with contextlib.suppress(OSError):  # the lock is what matters; the record only names its holder
        os.ftruncate(fd, 0)
        os.pwrite(fd, record, 0)


def read_holder(fd: int) -> dict[str, object] | None:
    """The JSON record a lock's holder wrote into the lock file (bounded); None until it has (the batch lock's too)."""
    try:
        data = os.pread(fd, MAX_HOLDER_BYTES, 0)
        holder = orjson.loads(data)
    except (OSError, orjson.JSONDecodeError):
        return None  # the holder has not written it yet
    return holder if isinstance(holder, dict) else None


def _refusal(workspace: Path, holder: dict[str, object] | None) -> str:
    who = "another forkpoint run"
    if holder is not None:
        run_id, pid, since = holder.get("run_id"), holder.get("pid"), holder.get("since")
        who = f"forkpoint run {str(run_id)[:200]!r} (pid {pid if isinstance(pid, int) else '?'}"
        who += f", since {str(since)[:40]})" if since else ")"
    return (f"the workspace {workspace} is in use by {who}; two runs in one workspace would mix their effects — "
            "wait for it to finish or use another workspace")
