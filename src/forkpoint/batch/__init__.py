"""`forkpoint batch`: thousands of replays from one jobs file, resumable, on a local pool or a Ray cluster.

The driver takes the batch dir (one driver per batch dir, named when refused: ``forkpoint.batch.lock``), reads the
jobs (bad lines reported with their number, the rest kept), records every job in the ledger (``ledger.sqlite``),
settles what a previous driver left running (only jobs whose lease no process holds: re-run when its journal proves
nothing ran, ``ambiguous`` otherwise), then keeps one job per worker slot in flight and records each outcome as it comes
back. Rerunning the same batch skips what is done and retries only retryable failures.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forkpoint.batch.ledger import Ledger, Outcome

LEDGER = "ledger.sqlite"
#: the run ids the driver gives jobs (``Job.run_id``, ``-aN`` for a retry): anything else read from a ledger is
#: never joined to a path
RUN_ID = re.compile(r"j-[0-9a-f]{20}(-a[0-9]{1,6})?")


@dataclass
class BatchOptions:
    workers: int = 1
    executor: str = "local"  # local | ray
    ray_address: str | None = None
    ray_temp_dir: str | None = None
    cpus_per_job: float = 1.0
    memory_per_job: int | None = None
    retries: int = 3
    defaults: dict[str, Any] = field(default_factory=dict)
    #: every job that runs commands must use this sandbox (``--require-sandbox bwrap`` for strangers' recordings)
    require_sandbox: str | None = None


@dataclass
class BatchProgress:
    total: int
    done: int = 0
    failed: int = 0
    running: int = 0
    started: float = field(default_factory=time.monotonic)
    interrupted: bool = False

    @property
    def rate(self) -> float:
        elapsed = time.monotonic() - self.started
        return (self.done + self.failed) / elapsed if elapsed > 0 else 0.0


def run_batch(jobs_file: Path, batch_dir: Path, options: BatchOptions,
              progress: Callable[[BatchProgress], None] | None = None,
              on_bad: Callable[[int, str], None] | None = None) -> dict[str, Any]:
    """Run (or resume) the batch; returns the summary :func:`status` gives.

    Raises ReplayError (``output_error``) when another driver holds the batch dir or the ledger is refused.
    Both paths are made absolute first: workers, path maps and Ray tasks must not depend on this cwd.
    """
    from forkpoint.batch.lock import lock_batch_dir

    batch_dir, jobs_file = Path(os.path.abspath(batch_dir)), Path(os.path.abspath(jobs_file))
    batch_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    with lock_batch_dir(batch_dir, jobs_file) as held:
        ledger = Ledger(batch_dir / LEDGER)
        try:
            with ledger.guard():
                return _run(ledger, held.token, jobs_file, batch_dir, options, progress, on_bad)
        finally:
            ledger.close()


def _run(ledger: Ledger, token: str, jobs_file: Path, batch_dir: Path, options: BatchOptions,
         progress: Callable[[BatchProgress], None] | None, on_bad: Callable[[int, str], None] | None
         ) -> dict[str, Any]:
    """The batch under the held driver lock."""
    from forkpoint.batch.expand import expand
    from forkpoint.batch.jobs import BadJob, read_lines
    from forkpoint.batch.worker import remove_leftovers

    live = _settle_stale(ledger, batch_dir)
    remove_leftovers(batch_dir)  # folders killed jobs created at recorded paths
    items = expand(read_lines(jobs_file, options.defaults, require_sandbox=options.require_sandbox))

    def feed(count: int) -> bool:
        """Read, parse and record up to ``count`` more lines' jobs (bad lines reported); False once the file is
        done. Jobs are fed as workers free up, so the first jobs run while later trajectories are still parsed."""
        jobs = []
        taken = 0
        for item in itertools.islice(items, count):
            taken += 1
            if isinstance(item, BadJob):
                ledger.add_bad(item.line, item.reason)
                if on_bad is not None:
                    on_bad(item.line, item.reason)
            else:
                jobs.append(item)
        added, _ = ledger.add_jobs(iter(jobs))
        state.total += added
        return taken == count

    counts = ledger.counts()
    state = BatchProgress(total=sum(counts.values()), done=counts["done"],
                          failed=counts["failed"] + counts["ambiguous"])
    executor = _executor(options)
    stop = _graceful_stop()
    try:
        _drive(ledger, executor, batch_dir, token, options.retries, state, stop, progress, feed, live)
    finally:
        executor.close(cancel=stop.hard)
        stop.restore()
    state.interrupted = stop.requested
    return {**status(batch_dir, ledger), "interrupted": stop.requested, "still_running_elsewhere": live,
            "elapsed_s": round(time.monotonic() - state.started, 3)}


def _drive(ledger: Ledger, executor: Any, batch_dir: Path, token: str, retries: int, state: BatchProgress, stop: Any,
           progress: Callable[[BatchProgress], None] | None, feed: Callable[[int], bool], live: list[str]) -> None:
    """Keep every slot busy until the jobs are done (or a stop); ``live`` gets the run ids of lost jobs whose
    process still holds their lease."""
    in_flight: dict[Any, Any] = {}
    cursor = 0
    more = True  # the jobs file may hold more lines
    while True:
        if not stop.requested:
            free = executor.slots - len(in_flight)
            if free > 0:
                batch = ledger.runnable(retries, free, after=cursor)
                while len(batch) < free and more:
                    more = feed(max(32, 4 * executor.slots))
                    batch = ledger.runnable(retries, free, after=cursor)
                if not batch and cursor:
                    cursor = 0  # a second pass picks up retryable failures
                    batch = [row for row in ledger.runnable(retries, free) if row[1].identity not in
                             {job.identity for job, _ in in_flight.values()}]
                for ordinal, job, attempts in batch:
                    cursor = max(cursor, ordinal)
                    run_id = job.run_id if attempts == 0 else f"{job.run_id}-a{attempts + 1}"
                    ledger.mark_running(job, run_id, executor.__class__.__name__)
                    in_flight[executor.submit(job.to_json(), str(batch_dir), run_id, token)] = (job, run_id)
        state.running = len(in_flight)
        if progress is not None:
            progress(state)
        if not in_flight and (not more or stop.requested):
            break
        if not in_flight:
            continue
        for handle, outcome in executor.wait(list(in_flight), timeout=0.5):
            job, run_id = in_flight.pop(handle)
            if isinstance(outcome, BaseException):
                stop.requested = stop.requested or _broken(outcome)
                lost = _lost(job, run_id, outcome, batch_dir)
                if lost is None:  # its process still holds the lease: left running, like a stopped driver's job
                    live.append(run_id)
                    continue
                result = lost
            else:
                result = Outcome(**outcome)
            ledger.finish(result)
            if result.exit_code == 0:
                state.done += 1
            else:
                state.failed += 1


#: a job's journal events after which it may have had effects (a branched job's branches journal their own
#: continuation starts in their own journals: its ``branches_started`` is the run's record of them)
EFFECT_EVENTS = frozenset({"tool_started", "continuation_started", "branches_started"})
#: how long the driver waits for a lost job's lease (its worker's death) before it reads the job's journal
LOST_LEASE_WAIT_S = 30.0


def _lost(job: Any, run_id: str, error: BaseException, batch_dir: Path) -> Outcome | None:
    """A job whose worker died under it: retryable when nothing can have run (its journal shows no tool and no
    continuation start), else ambiguous — never re-executed when its effects are unknown.

    The journal is read only once the job's lease is free: the executor can report a job lost while its process
    still runs (a local pool fails every in-flight job the moment one worker dies, and only then terminates the
    others; a Ray node counted dead may still be running). None when the lease is still held after
    :data:`LOST_LEASE_WAIT_S`: the job stays ``running`` for a later driver to settle (as a stopped driver's
    orphan)."""
    from forkpoint.batch.lock import lease_free
    from forkpoint.run.journal import read_events

    deadline = time.monotonic() + LOST_LEASE_WAIT_S
    while not lease_free(batch_dir, run_id):
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)
    events = read_events(batch_dir / "state" / run_id / "journal.jsonl")
    started = job.mode != "prepare-only" and any(
        e.get("event") in EFFECT_EVENTS for e in events)
    category, code = ("ambiguous_execution", 31) if started else ("internal_error", 50)
    return Outcome(identity=job.identity, run_id=run_id, exit_code=code, category=category, retryable=not started,
                   message=f"the worker running this job died ({type(error).__name__}: {error})"[:2000],
                   phase=None, quality=None, agent_status="not_started", seconds=0.0, worker="lost")


def _broken(error: BaseException) -> bool:
    """A local pool whose worker died cannot take more jobs: stop submitting (a rerun resumes)."""
    from concurrent.futures.process import BrokenProcessPool

    return isinstance(error, BrokenProcessPool)


class _Stop:
    """First Ctrl-C: no new job starts, running jobs finish and are recorded. Second: stop waiting (what was
    running stays ``running`` in the ledger; the next run settles it by its journal)."""

    def __init__(self) -> None:
        self.requested = False
        self.hard = False
        self.previous: Any = None

    def __call__(self, signum: int, frame: Any) -> None:
        if self.requested:
            self.hard = True
            raise KeyboardInterrupt
        self.requested = True

    def restore(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


def _graceful_stop() -> _Stop:
    stop = _Stop()
    with contextlib.suppress(ValueError):  # not the main thread: Ctrl-C is the caller's business
        stop.previous = signal.signal(signal.SIGINT, stop)
    return stop


def _executor(options: BatchOptions) -> Any:
    from forkpoint.batch.executors import LocalPool, RayCluster

    if options.executor == "ray":
        return RayCluster(options.ray_address, cpus=options.cpus_per_job, memory=options.memory_per_job,
                          slots=None, temp_dir=options.ray_temp_dir, local_cpus=options.workers)
    return LocalPool(options.workers)


def _settle_stale(ledger: Ledger, batch_dir: Path) -> list[str]:
    """Jobs a stopped driver left ``running``: re-run when nothing can have happened (prepare-only, or a journal
    without any tool or continuation start), else ``ambiguous`` — never executed twice silently. A job whose lease
    a process still holds is alive (an orphan of that driver): left ``running`` and untouched; its run ids are
    returned. A run id that is not forkpoint's shape is never joined to a path."""
    from forkpoint.batch.lock import lease_free
    from forkpoint.run.journal import read_events
    from forkpoint.run.journal_rules import describe_ambiguous

    live = []
    for identity, run_id, effects in ledger.stale_running():
        if run_id is None or not RUN_ID.fullmatch(run_id):
            ledger.reset(identity, status="ambiguous", message=f"the ledger names run id {str(run_id)[:80]!r}, not "
                         "one forkpoint gives: its files are not touched and it is not run again")
            continue
        if not lease_free(batch_dir, run_id):
            live.append(run_id)
            continue
        events = read_events(batch_dir / "state" / run_id / "journal.jsonl")
        started = [e for e in events if e.get("event") in EFFECT_EVENTS]
        if effects and started:
            detail = describe_ambiguous(events) or "its continuation had started"  # names a call that did not finish
            ledger.reset(identity, status="ambiguous", message=f"the previous batch driver stopped while job run "
                         f"{run_id} was running: {detail}; it is not run again (its workspace was not fresh)")
            continue
        for folder in ("runs", "state", "work"):
            shutil.rmtree(batch_dir / folder / run_id, ignore_errors=True)
        ledger.reset(identity, status="pending")
    return live


def status(batch_dir: Path, ledger: Ledger | None = None) -> dict[str, Any]:
    """Counts by status and failure category, the bad lines and the failed jobs of a batch dir."""
    own = ledger is None
    if ledger is None:
        if not os.path.lexists(batch_dir / LEDGER):
            raise FileNotFoundError(f"{batch_dir} is not a forkpoint batch dir (no {LEDGER})")
        ledger = Ledger(batch_dir / LEDGER)
    try:
        with ledger.guard():
            return _status(batch_dir, ledger)
    finally:
        if own:
            ledger.close()


def _status(batch_dir: Path, ledger: Ledger) -> dict[str, Any]:
    counts = ledger.counts()
    bad = ledger.bad()
    return {"schema_version": "forkpoint.batch-status/v1", "batch_dir": str(batch_dir),
            "jobs": sum(counts.values()), "counts": counts, "by_category": ledger.by_category(),
            "model_usage": ledger.usage(),
            "bad_lines": [{"line": line, "reason": reason} for line, reason in bad],
            "failed": ledger.failures(), "partial": ledger.partial(), "groups": _groups(batch_dir, ledger)}


def _groups(batch_dir: Path, ledger: Ledger) -> list[dict[str, Any]]:
    """The batch's reward groups (forkpoint.batch.groups): jobs sharing a trajectory digest and a boundary."""
    from forkpoint.run.groups import batch_groups

    run_ids = [job["run_id"] for job in ledger.jobs() if job["status"] in ("done", "failed")
               and isinstance(job["run_id"], str) and RUN_ID.fullmatch(job["run_id"])]
    return batch_groups(batch_dir / "runs" / run_id for run_id in run_ids)
