"""One driver per batch dir, and a lease per running job.

Two drivers on one batch dir would each take the other's ``running`` jobs for a dead driver's leftovers: delete
their work and state, settle or re-run them while their effects happen, and race on the ledger. So the driver holds
``flock(LOCK_EX | LOCK_NB)`` on ``<batch>/driver.lock`` for its whole life, and a second driver is refused
(``output_error``) naming the holder (pid, host, since, jobs file). The file stays (never unlinked: no unlink race);
the lock, not the record, is the truth. It is opened with ``O_NOFOLLOW`` and must be a regular file of ours.

The lock dies with its driver, but the driver's jobs may not have died yet (a local worker a moment after
PR_SET_PDEATHSIG, a Ray task until the cluster notices). So each job holds a lease while it runs: an flock on
``<batch>/leases/<run-id>``, taken by the worker before it touches anything and unlinked by it (still holding it)
at the end. A new driver settles a job left ``running`` only when it can take that job's lease itself; a held
lease means the job is alive: it stays ``running``, untouched, for a later run to settle. A worker also checks,
under its lease, that the driver that sent it still holds the batch dir (its token is in ``driver.lock``): a task
queued by a dead driver never starts under the next one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import socket
import stat
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import orjson

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.workspace.lock import read_holder

DRIVER_LOCK: Final = "driver.lock"
LEASES: Final = "leases"
_FLAGS: Final = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_ATTEMPTS: Final = 20


class DriverLock:
    """The held batch-dir lock; ``token`` identifies this driver to its workers."""

    def __init__(self, fd: int, token: str) -> None:
        self._fd: int | None = fd
        self.token = token

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)  # the only descriptor: closing it releases the flock

    def __enter__(self) -> DriverLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_batch_dir(batch_dir: Path, jobs_file: Path) -> DriverLock:
    """Take the batch dir for this driver or refuse, naming the driver that has it."""
    path = batch_dir / DRIVER_LOCK
    fd = _open_own(path, create=True)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = read_holder(fd)
            deadline = time.monotonic() + 5
            while not holder and time.monotonic() < deadline:  # the holder writes it right after taking the lock
                time.sleep(0.01)
                holder = read_holder(fd)
            raise ReplayError(ErrorKind.OUTPUT, _refusal(batch_dir, holder)) from None
        token = secrets.token_hex(16)
        since = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        record = orjson.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": since,
                               "jobs": str(jobs_file), "token": token})
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, record, 0)
        except OSError as error:
            raise ReplayError(ErrorKind.OUTPUT, f"cannot write the batch lock {path}: {error.strerror}") from None
        return DriverLock(fd, token)
    except BaseException:
        os.close(fd)
        raise


def driver_token(batch_dir: Path) -> str | None:
    """The token of the driver that last took the batch dir (None when unreadable)."""
    try:
        fd = _open_own(batch_dir / DRIVER_LOCK, create=False)
    except (ReplayError, FileNotFoundError):
        return None
    try:
        record = read_holder(fd)
    finally:
        os.close(fd)
    token = record.get("token") if record else None
    return token if isinstance(token, str) else None


@contextlib.contextmanager
def job_lease(batch_dir: Path, run_id: str, token: str | None) -> Iterator[None]:
    """Hold the job's lease while it runs (worker side); refuse when it is held or the driver changed."""
    folder = batch_dir / LEASES
    with contextlib.suppress(FileExistsError):
        folder.mkdir(mode=0o700)
    dir_fd = _open_dir(folder)
    try:
        fd = _take(dir_fd, run_id, folder)
        try:
            if token is not None and driver_token(batch_dir) != token:
                raise ReplayError(ErrorKind.OUTPUT, f"job run {run_id} was sent by a batch driver that no longer "
                                  f"holds {batch_dir}; not started")
            yield
        finally:
            _drop(dir_fd, run_id, fd)
    finally:
        os.close(dir_fd)


def lease_free(batch_dir: Path, run_id: str) -> bool:
    """True when no process holds the job's lease (driver side, before settling a job left ``running``); the
    lease file is then removed."""
    folder = batch_dir / LEASES
    try:
        dir_fd = _open_dir(folder)
    except FileNotFoundError:
        return True
    try:
        try:
            fd = os.open(run_id, _FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return True
        except OSError:
            return False  # a link or something odd planted there: not provably free
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return False
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        _drop(dir_fd, run_id, fd)
        return True
    finally:
        os.close(dir_fd)


def _take(dir_fd: int, name: str, folder: Path) -> int:
    for _ in range(_ATTEMPTS):
        try:
            fd = os.open(name, _FLAGS | os.O_CREAT, 0o600, dir_fd=dir_fd)
        except OSError as error:
            raise ReplayError(ErrorKind.OUTPUT, f"cannot open the job lease {folder / name}: {error.strerror}"
                              ) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ReplayError(ErrorKind.OUTPUT, f"the job lease {folder / name} is not a regular file")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ReplayError(ErrorKind.OUTPUT, f"job run {name} is already running (its lease {folder / name} "
                              "is held); not started twice") from None
        except BaseException:
            os.close(fd)
            raise
        try:
            current = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            current = None
        held = os.fstat(fd)
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            return fd
        os.close(fd)  # released and unlinked by its previous holder meanwhile: take a fresh one
    raise ReplayError(ErrorKind.OUTPUT, f"cannot take the job lease {folder / name}: it kept changing")


def _drop(dir_fd: int, name: str, fd: int) -> None:
    """Unlink the lease while still holding it (only if the name is still ours), then release it."""
    try:
        with contextlib.suppress(OSError):
            current = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            held = os.fstat(fd)
            if (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
                os.unlink(name, dir_fd=dir_fd)
    finally:
        os.close(fd)


def _open_dir(folder: Path) -> int:
    try:
        return os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise ReplayError(ErrorKind.OUTPUT, f"{folder} is not a directory of forkpoint's ({error.strerror})"
                          ) from None


def _open_own(path: Path, *, create: bool) -> int:
    try:
        fd = os.open(path, _FLAGS | (os.O_CREAT if create else 0), 0o600)
    except FileNotFoundError:
        raise
    except OSError as error:
        raise ReplayError(ErrorKind.OUTPUT, f"cannot open the batch lock {path} ({error.strerror}); a symbolic "
                          "link or a special file there is refused") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid():
        os.close(fd)
        raise ReplayError(ErrorKind.OUTPUT, f"the batch lock {path} is not a regular file of yours; refused")
    return fd


def _refusal(batch_dir: Path, holder: dict[str, object] | None) -> str:
    who = "another forkpoint batch driver"
    if holder is not None:
        pid, host, since, jobs = (holder.get(key) for key in ("pid", "host", "since", "jobs"))
        who = (f"forkpoint batch driver pid {pid if isinstance(pid, int) else '?'} on {str(host)[:100]}"
               f" (since {str(since)[:40]}, jobs {str(jobs)[:300]})")
    return (f"the batch dir {batch_dir} is in use by {who}; one driver per batch dir — a second would take its "
            "running jobs for leftovers. Wait for it to finish (then rerun to resume), or use another --out")
