"""Run one batch job in this interpreter (local pool workers and Ray tasks call :func:`run_job`).

Where the job's fresh workspace lives: under ``--sandbox bwrap`` a private ``work/<run-id>/ws`` mounted at the
recorded cwd; with ``local`` and an adapter that rewrites paths, a private workspace plus ``--path-map
RECORDED=PRIVATE``; otherwise (the adapter's tools must see the recorded path) the recorded cwd itself, held by an
exclusive per-path lock so two jobs never share it, created for the job with the parent folders that were missing
and all removed after it (an existing path there, an empty folder too, is refused: forkpoint never changes or leaves
anything in a folder it did not create). The job's run, state and output dirs are under the batch dir.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from forkpoint.batch.jobs import Job
from forkpoint.batch.ledger import Outcome

_MODE_FLAGS = {"prepare-only": {"prepare_only": True}, "replay-only": {"replay_only": True}, "continue": {}}


def run_job(spec: dict[str, Any], batch_dir: str, run_id: str, driver: str | None = None) -> dict[str, Any]:
    """Execute one job under its lease (``driver``: the sending driver's token, checked under the lease: see
    forkpoint.batch.lock); returns an :class:`Outcome` as JSON. Never raises for a job's own failure."""
    from forkpoint.batch.lock import job_lease
    from forkpoint.core.errors import ErrorKind, ReplayError
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request

    job = Job.from_json(spec)
    root = Path(batch_dir)
    started = time.monotonic()
    values: dict[str, Any] = {
        "agent": job.agent, "trajectory": str(job.trajectory), "after_step": job.after_step, "run_id": run_id,
        "state_dir": str(root / "state"), "output_dir": str(root / "runs"), **_MODE_FLAGS[job.mode],
        **{k: v for k, v in job.options.items() if k != "timeout_s"},
    }
    try:
        if isinstance(values.get("score"), dict):  # a [score]-like table: the request's keys
            from forkpoint.run.request import score_table

            values.update(score_table(values.pop("score"), f"job {job.line}", values))
        with job_lease(root, run_id, driver), _workspace(job, root, run_id) as (workspace, extra):
            values["workspace"] = str(workspace)
            values.update(extra)
            result = execute(build_request(values, source=f"job {job.line}"))
        failure = result.failure
        branches = Outcome.branches_of(result.metadata.get("branches"))
        if failure is None and branches["branches_failed"]:  # a partial job: done, the failures named
            from forkpoint.branches.branching import partial_text

            message: str | None = partial_text(result.metadata.get("branches"))
        else:
            message = failure.message if failure else None
        outcome = Outcome(
            identity=job.identity, run_id=run_id, exit_code=result.exit_code,
            category=failure.category if failure else None, retryable=bool(failure and failure.retryable),
            message=message, phase=result.phase, quality=result.quality,
            agent_status=result.agent_status, seconds=time.monotonic() - started, worker=_worker(),
            **Outcome.usage_of(result.metadata.get("model_usage")), **branches)
    except ReplayError as error:
        outcome = _failed(job, run_id, error.kind, error.message, started)
    except Exception as error:  # a bug in one job must not end the batch: recorded as internal
        outcome = _failed(job, run_id, ErrorKind.INTERNAL, f"internal error: {error!r}", started)
    return outcome.to_json()


def _failed(job: Job, run_id: str, kind: Any, message: str, started: float) -> Outcome:
    return Outcome(identity=job.identity, run_id=run_id, exit_code=kind.exit_code, category=kind.category,
                   retryable=kind.retryable, message=message, phase=None, quality=None, agent_status="not_started",
                   seconds=time.monotonic() - started, worker=_worker())


def _worker() -> str:
    return f"{os.uname().nodename}:{os.getpid()}"


@contextmanager
def _workspace(job: Job, root: Path, run_id: str) -> Iterator[tuple[Path, dict[str, Any]]]:
    """(workspace, extra request values) for the job, cleaned up after it."""
    from forkpoint.adapters import agent_spec

    private = root / "work" / run_id / "ws"
    if job.mode == "prepare-only":
        private.parent.mkdir(parents=True, exist_ok=True)
        private.mkdir(exist_ok=True)
        try:
            yield private, {}
        finally:
            shutil.rmtree(private.parent, ignore_errors=True)
        return
    source = {"workspace_from": job.options["workspace_from"]}
    sandbox = job.options.get("sandbox", "local")
    features = agent_spec(job.agent).sandbox_features
    if sandbox == "bwrap" or job.recorded_cwd is None:
        private.parent.mkdir(parents=True, exist_ok=True)
        try:
            yield private, source
        finally:
            shutil.rmtree(private.parent, ignore_errors=True)
        return
    if "path_map" in features:
        private.parent.mkdir(parents=True, exist_ok=True)
        try:
            yield private, {**source, "path_map": [f"{job.recorded_cwd}={private}"]}
        finally:
            shutil.rmtree(private.parent, ignore_errors=True)
        return
    recorded = Path(job.recorded_cwd)
    with _path_lock(root, recorded) as record:
        top = _create_recorded(recorded, record)
        try:
            yield recorded, source
        finally:
            _remove_created(record, top)


@contextmanager
def _path_lock(root: Path, path: Path) -> Iterator[Path]:
    """One job at a time at a recorded path (across this batch's workers on this machine); yields the path of
    the record naming what a job created there (beside the lock file)."""
    locks = root / "locks"
    locks.mkdir(exist_ok=True)
    name = hashlib.sha256(str(path).encode()).hexdigest()[:32]
    fd = os.open(locks / name, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield locks / f"{name}{_CREATED}"
    finally:
        os.close(fd)


#: the suffix of the record (beside a path lock) naming the topmost folder a job created for a recorded cwd
_CREATED = ".created"


def _create_recorded(recorded: Path, record: Path) -> Path:
    """Create the recorded cwd for one job, with the parent folders that are missing; returns the topmost folder
    created. A path that exists is refused: forkpoint never changes, fills or leaves anything in a folder it did
    not create (an empty one too: its mode would take the source's). A leftover a killed job of this batch created
    (named in ``record``, same device and inode) is removed first."""
    from forkpoint.core.errors import ErrorKind, ReplayError

    if not recorded.is_absolute() or ".." in recorded.parts or os.path.normpath(recorded) != str(recorded):
        raise ReplayError(ErrorKind.WORKSPACE, f"the recorded cwd {str(recorded)[:300]!r} is not a plain absolute "
                                               "path; the job cannot work there")
    _remove_leftover(record)
    if os.path.lexists(recorded):
        raise ReplayError(ErrorKind.WORKSPACE, f"the recorded cwd {recorded} exists; a batch job works at a recorded "
                                               "path only when it creates it (and removes it after), never in a "
                                               "folder it did not make — remove it, or use --sandbox bwrap")
    missing = [recorded]
    while not os.path.lexists(missing[-1].parent):
        missing.append(missing[-1].parent)
    top = missing[-1]
    if not os.path.isdir(top.parent):
        raise ReplayError(ErrorKind.WORKSPACE, f"the recorded cwd {recorded} lies under {top.parent}, which is not "
                                               "a directory")
    try:
        os.mkdir(top, 0o700)
        _write_record(record, top)
        for folder in reversed(missing[:-1]):
            os.mkdir(folder, 0o700)
    except OSError as error:
        _remove_created(record, top)
        raise ReplayError(ErrorKind.WORKSPACE, f"cannot create the recorded cwd {recorded}: {error}") from None
    return top


def _write_record(record: Path, top: Path) -> None:
    from forkpoint.branches.branching import directory_identity
    from forkpoint.core.results import write_json

    write_json(record, directory_identity(top))


def _record(record: Path) -> dict[str, Any] | None:
    """A path record of the batch dir, read bounded (a FIFO refused without blocking); None when unusable."""
    from forkpoint.core.errors import ReplayError
    from forkpoint.core.results import read_document

    try:
        return read_document(record)
    except ReplayError:
        return None


def _remove_created(record: Path, top: Path) -> None:
    """Remove the folders a job created (``top`` and all below it) while ``top`` is still the recorded directory,
    then the record."""
    from forkpoint.branches.branching import same_directory
    from forkpoint.process.childenv import remove_tree

    if record.is_file() and not record.is_symlink():
        identity = _record(record)
        if same_directory(top, identity):
            remove_tree(top)  # links not followed; what the job made unwritable opened up
    record.unlink(missing_ok=True)


def _remove_leftover(record: Path) -> None:
    """What a killed job created at this recorded path (its record names it), removed; held under the path lock."""
    if not record.is_file() or record.is_symlink():
        record.unlink(missing_ok=True)
        return
    path = (_record(record) or {}).get("path")
    if isinstance(path, str) and os.path.isabs(path):
        _remove_created(record, Path(path))
    record.unlink(missing_ok=True)


def remove_leftovers(batch_dir: Path) -> None:
    """At a driver's start: remove what killed jobs created at recorded paths, skipping any path a live job holds."""
    locks = batch_dir / "locks"
    for record in sorted(locks.glob(f"*{_CREATED}")) if locks.is_dir() else []:
        try:
            fd = os.open(locks / record.name.removesuffix(_CREATED), os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            _remove_leftover(record)
        finally:
            os.close(fd)
