"""The batch ledger: one SQLite database (WAL) in the batch dir, the only record of what a batch did.

One row per job identity. States: ``pending`` -> ``running`` (committed BEFORE the job starts; durably when the job
can have effects) -> ``done`` | ``failed`` (category, exit code, retryable) | ``ambiguous`` (it started, did not
finish, and its journal shows a tool may have run: never executed again). Bad job lines are kept with their
reason. Each job also sums what its model calls used over its attempts (calls and tokens: ``Ledger.usage``).
Only the driver writes (one driver per batch dir: ``forkpoint.batch.lock``); workers report back to it.

A later line repeating a job is noted in ``duplicates`` (one row per line, O(1) per duplicate; ledgers written before
that table kept the lines as a JSON list in ``jobs.duplicate_lines``, still read). The ledger and its SQLite side
files are opened only when they are regular files of one link (or absent): a symlink or a hard link to another
application's database would get forkpoint's tables and WAL mode, a FIFO would hang the driver. Every refusal and
every SQLite failure is a typed ``output_error`` naming the file (:class:`LedgerError`).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forkpoint.batch.jobs import Job
from forkpoint.core.errors import ErrorKind, ReplayError

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    identity TEXT PRIMARY KEY, ordinal INTEGER NOT NULL, line INTEGER NOT NULL, duplicate_lines TEXT NOT NULL,
    spec TEXT NOT NULL, agent TEXT NOT NULL, mode TEXT NOT NULL, after_step INTEGER NOT NULL,
    status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, run_id TEXT, effects INTEGER NOT NULL,
    exit_code INTEGER, category TEXT, retryable INTEGER, message TEXT, phase TEXT, quality TEXT,
    agent_status TEXT, started_at REAL, finished_at REAL, seconds REAL, worker TEXT,
    model_calls INTEGER NOT NULL DEFAULT 0, input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0, cached_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0, branches INTEGER NOT NULL DEFAULT 0,
    branches_failed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS jobs_status ON jobs(status, ordinal);
CREATE TABLE IF NOT EXISTS bad_jobs (line INTEGER PRIMARY KEY, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS duplicates (identity TEXT NOT NULL, line INTEGER NOT NULL, PRIMARY KEY (identity, line))
    WITHOUT ROWID;
"""
#: the files SQLite opens next to the ledger (WAL, its shared-memory index, the rollback journal)
SIDE_FILES = ("-wal", "-shm", "-journal")

STATUSES = ("pending", "running", "done", "failed", "ambiguous")
#: what a job's model calls used, summed over its attempts (a retried job paid for every attempt); the columns a
#: ledger written before they existed gets when it is opened
USAGE_COLUMNS = ("model_calls", "input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens")
#: a branched job's branch counts (columns a ledger written before them gets when it is opened)
BRANCH_COLUMNS = ("branches", "branches_failed")


@dataclass(frozen=True)
class Outcome:
    """What one attempt of a job ended with (from the worker)."""

    identity: str
    run_id: str
    exit_code: int
    category: str | None
    retryable: bool
    message: str | None
    phase: str | None
    quality: str | None
    agent_status: str | None
    seconds: float
    worker: str
    #: the attempt's model calls and tokens (``model_usage`` of its result; zeros when it made no call)
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    #: a branched job's branches and how many of them failed (a job with some failed is ``done`` but partial;
    #: with all failed it is ``failed``: forkpoint.branches.branching.branches_failure)
    branches: int = 0
    branches_failed: int = 0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @staticmethod
    def branches_of(metadata: Any) -> dict[str, int]:
        """``branches`` and ``branches_failed`` from a result's ``metadata.branches`` (0 when not branched)."""
        found = metadata if isinstance(metadata, dict) else {}
        return {"branches": _count(found.get("count")), "branches_failed": _count(found.get("failed"))}

    @staticmethod
    def usage_of(model_usage: Any) -> dict[str, int]:
        """The usage fields from a result's ``model_usage`` (hostile or missing counts read as 0)."""
        found = model_usage if isinstance(model_usage, dict) else {}
        return {column: _count(found.get("calls" if column == "model_calls" else column))
                for column in USAGE_COLUMNS}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


class LedgerError(ReplayError):
    """The ledger cannot be used (a link, not a regular file, not a database, locked, I/O): ``output_error``."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(ErrorKind.OUTPUT, f"batch ledger {path}: {why}")
        self.path = path


def check_ledger_files(path: Path) -> None:
    """Refuse a ledger (or a side file) that is a symlink, a hard link or not a regular file; absent is fine."""
    for name in (path, *(path.with_name(path.name + suffix) for suffix in SIDE_FILES)):
        try:
            info = os.lstat(name)
        except FileNotFoundError:
            continue
        except OSError as error:
            raise LedgerError(name, f"cannot inspect it ({error.strerror})") from None
        if stat.S_ISLNK(info.st_mode):
            raise LedgerError(name, "is a symbolic link; forkpoint opens only its own regular files (remove the "
                                    "link, or use another batch dir)")
        if not stat.S_ISREG(info.st_mode):
            raise LedgerError(name, "is not a regular file; refused")
        if info.st_nlink != 1:
            raise LedgerError(name, f"has {info.st_nlink} hard links: it may be another application's file; "
                                    "refused")
        if info.st_uid != os.geteuid():
            raise LedgerError(name, f"belongs to uid {info.st_uid}, not to you; refused")


class Ledger:
    def __init__(self, path: Path) -> None:
        self.path = path
        check_ledger_files(path)
        try:
            self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10.0)
        except sqlite3.Error as error:
            raise LedgerError(path, f"cannot open it ({error})") from None
        try:
            with self.guard():
                tables = {row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
                if tables and "jobs" not in tables:
                    raise LedgerError(path, f"is a SQLite database without forkpoint's jobs table (it holds "
                                            f"{', '.join(sorted(tables)[:5])[:200]}): not a batch ledger; refused, "
                                            "left untouched")
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=NORMAL")
                self.db.executescript(SCHEMA)
                present = {row[1] for row in self.db.execute("PRAGMA table_info(jobs)")}
                for column in (*USAGE_COLUMNS, *BRANCH_COLUMNS):
                    if column not in present:  # a ledger from before the usage columns: resumable, old jobs at 0
                        self.db.execute(f"ALTER TABLE jobs ADD COLUMN {column} INTEGER NOT NULL DEFAULT 0")
                self._ordinal = int(self.db.execute("SELECT COALESCE(MAX(ordinal), 0) FROM jobs").fetchone()[0])
        except BaseException:
            self.db.close()
            raise

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """SQLite's untyped failures (not a database, locked, disk full) as a :class:`LedgerError` naming the
        file."""
        try:
            yield
        except sqlite3.Error as error:
            why = str(error)
            if isinstance(error, sqlite3.DatabaseError) and "not a database" in why:
                why = "is not a SQLite database (corrupt, or not a forkpoint ledger); refused, left untouched"
            elif "locked" in why:
                why = f"{why}: another process holds it (one forkpoint batch driver per batch dir)"
            raise LedgerError(self.path, why) from None

    def close(self) -> None:
        self.db.close()

    # -- filling ------------------------------------------------------------------------------------------------

    def add_jobs(self, jobs: Iterator[Job]) -> tuple[int, int]:
        """Insert new jobs (one transaction); an identity already present is the same job: its line is noted.
        Returns (new jobs, merged duplicates)."""
        added = merged = 0
        ordinal = self._ordinal
        self.db.execute("BEGIN")
        try:
            for job in jobs:
                row = self.db.execute("SELECT line FROM jobs WHERE identity = ?", (job.identity,)).fetchone()
                if row is not None:
                    if job.line != row[0]:  # one row per (job, line): O(1), a repeated line is noted once
                        merged += self.db.execute("INSERT OR IGNORE INTO duplicates (identity, line) VALUES (?, ?)",
                                                  (job.identity, job.line)).rowcount
                    continue
                ordinal += 1
                added += 1
                self.db.execute(
                    "INSERT INTO jobs (identity, ordinal, line, duplicate_lines, spec, agent, mode, after_step, "
                    "status, effects) VALUES (?, ?, ?, '[]', ?, ?, ?, ?, 'pending', ?)",
                    (job.identity, ordinal, job.line, json.dumps(job.to_json()), job.agent, job.mode,
                     job.after_step, int(job.mode != "prepare-only")))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self._ordinal = ordinal
        return added, merged

    def add_bad(self, line: int, reason: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO bad_jobs (line, reason) VALUES (?, ?)", (line, reason))

    # -- running ------------------------------------------------------------------------------------------------

    def stale_running(self) -> list[tuple[str, str | None, bool]]:
        """(identity, run id, has effects) of jobs a previous driver left ``running``."""
        return [(r[0], r[1], bool(r[2])) for r in
                self.db.execute("SELECT identity, run_id, effects FROM jobs WHERE status = 'running'")]

    def runnable(self, retries: int, limit: int, after: int = 0) -> list[tuple[int, Job, int]]:
        """Up to ``limit`` jobs to run, in order after ordinal ``after``: pending ones, and failed retryable ones
        with attempts left. Returns (ordinal, job, attempts so far)."""
        rows = self.db.execute(
            "SELECT ordinal, spec, attempts FROM jobs WHERE ordinal > ? AND (status = 'pending' OR "
            "(status = 'failed' AND retryable = 1 AND attempts <= ?)) ORDER BY ordinal LIMIT ?",
            (after, retries, limit)).fetchall()
        return [(r[0], Job.from_json(json.loads(r[1])), r[2]) for r in rows]

    def mark_running(self, job: Job, run_id: str, worker: str) -> None:
        """Committed before the job starts; fsync'd first when the job can have effects (the receipt that makes
        a crash detectable)."""
        durable = job.mode != "prepare-only"
        if durable:
            self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("UPDATE jobs SET status = 'running', attempts = attempts + 1, run_id = ?, started_at = ?, "
                        "worker = ?, finished_at = NULL WHERE identity = ?",
                        (run_id, time.time(), worker, job.identity))
        if durable:
            self.db.execute("PRAGMA synchronous=NORMAL")

    def finish(self, outcome: Outcome) -> None:
        status = "done" if outcome.exit_code == 0 else ("ambiguous" if outcome.category == "ambiguous_execution"
                                                        else "failed")
        self.db.execute(
            "UPDATE jobs SET status = ?, exit_code = ?, category = ?, retryable = ?, message = ?, phase = ?, "
            "quality = ?, agent_status = ?, finished_at = ?, seconds = ?, worker = ?, branches = ?, "
            "branches_failed = ?, "
            + ", ".join(f"{column} = {column} + ?" for column in USAGE_COLUMNS) + " WHERE identity = ?",
            (status, outcome.exit_code, outcome.category, int(outcome.retryable), outcome.message, outcome.phase,
             outcome.quality, outcome.agent_status, time.time(), outcome.seconds, outcome.worker, outcome.branches,
             outcome.branches_failed, *(getattr(outcome, column) for column in USAGE_COLUMNS), outcome.identity))

    def reset(self, identity: str, *, status: str, message: str | None = None) -> None:
        self.db.execute("UPDATE jobs SET status = ?, message = COALESCE(?, message), category = CASE WHEN ? = "
                        "'ambiguous' THEN 'ambiguous_execution' ELSE category END, attempts = CASE WHEN ? = "
                        "'pending' THEN MAX(attempts - 1, 0) ELSE attempts END WHERE identity = ?",
                        (status, message, status, status, identity))

    # -- reading ------------------------------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        found = dict(self.db.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall())
        return {status: int(found.get(status, 0)) for status in STATUSES}

    def bad(self) -> list[tuple[int, str]]:
        return [(int(r[0]), str(r[1])) for r in self.db.execute("SELECT line, reason FROM bad_jobs ORDER BY line")]

    def by_category(self) -> dict[str, int]:
        rows = self.db.execute("SELECT category, COUNT(*) FROM jobs WHERE status IN ('failed', 'ambiguous') "
                               "GROUP BY category ORDER BY category").fetchall()
        return {str(r[0]): int(r[1]) for r in rows}

    def usage(self) -> dict[str, int]:
        """The batch's model calls and tokens, every job and attempt."""
        row = self.db.execute(f"SELECT {', '.join(f'COALESCE(SUM({c}), 0)' for c in USAGE_COLUMNS)} FROM jobs")
        return dict(zip(USAGE_COLUMNS, (int(value) for value in row.fetchone()), strict=True))

    def failures(self, limit: int = 1000) -> list[dict[str, Any]]:
        keys = ("identity", "line", "status", "agent", "mode", "after_step", "run_id", "category", "exit_code",
                "retryable", "attempts", "message")
        rows = self.db.execute(f"SELECT {', '.join(keys)} FROM jobs WHERE status IN ('failed', 'ambiguous') "
                               "ORDER BY ordinal LIMIT ?", (limit,)).fetchall()
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def partial(self, limit: int = 1000) -> list[dict[str, Any]]:
        """Done jobs some of whose branches failed (the message names how many and their categories)."""
        keys = ("identity", "line", "agent", "mode", "after_step", "run_id", "branches", "branches_failed",
                "message")
        rows = self.db.execute(f"SELECT {', '.join(keys)} FROM jobs WHERE status = 'done' AND branches_failed > 0 "
                               "ORDER BY ordinal LIMIT ?", (limit,)).fetchall()
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def jobs(self) -> Iterator[dict[str, Any]]:
        """Every job in order; ``duplicate_lines`` is the JSON list of the later lines that repeated it."""
        keys = ("identity", "line", "duplicate_lines", "agent", "mode", "after_step", "status", "attempts", "run_id",
                "exit_code", "category", "phase", "quality", "agent_status", "seconds", *USAGE_COLUMNS)
        noted = "(SELECT group_concat(line) FROM duplicates WHERE duplicates.identity = jobs.identity)"
        for row in self.db.execute(f"SELECT {', '.join(keys)}, {noted} FROM jobs ORDER BY ordinal"):
            job = dict(zip(keys, row[:-1], strict=True))
            lines = set(json.loads(job["duplicate_lines"])) | {int(n) for n in (row[-1] or "").split(",") if n}
            job["duplicate_lines"] = json.dumps(sorted(lines))
            yield job
