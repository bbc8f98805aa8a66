"""The SQLite ledger: WAL, one row per identity, the job life cycle, and what a stale `running` row becomes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from forkpoint.batch.jobs import Job
from forkpoint.batch.ledger import Ledger, Outcome


def _job(n: int, mode: str = "replay-only") -> Job:
    return Job(identity=f"{n:064x}", line=n, trajectory=Path("/t.jsonl"), trajectory_sha256="s" * 64,
               agent="claude-code", after_step=1, mode=mode, recorded_cwd="/w", options={})


def _outcome(job: Job, code: int, category: str | None = None, retryable: bool = False) -> Outcome:
    return Outcome(identity=job.identity, run_id=job.run_id, exit_code=code, category=category, retryable=retryable,
                   message=None, phase="replayed", quality="verified", agent_status="not_started", seconds=0.1,
                   worker="w")


def test_life_cycle_duplicates_and_retries(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    assert ledger.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    jobs = [_job(1), _job(2), _job(3)]
    assert ledger.add_jobs(iter([*jobs, Job(**{**jobs[0].__dict__, "line": 9})])) == (3, 1)
    assert ledger.add_jobs(iter(jobs)) == (0, 0)  # a rerun adds nothing
    for job in jobs:
        ledger.mark_running(job, job.run_id, "w")
    assert ledger.counts()["running"] == 3
    ledger.finish(_outcome(jobs[0], 0))
    ledger.finish(_outcome(jobs[1], 40, "model_rate_limit", retryable=True))
    ledger.finish(_outcome(jobs[2], 30, "executor_error"))
    assert ledger.counts() == {"pending": 0, "running": 0, "done": 1, "failed": 2, "ambiguous": 0}
    assert [job.identity for _, job, _ in ledger.runnable(retries=3, limit=10)] == [jobs[1].identity]
    assert ledger.runnable(retries=0, limit=10) == []  # attempts used up
    assert ledger.by_category() == {"executor_error": 1, "model_rate_limit": 1}
    row = next(r for r in ledger.jobs() if r["identity"] == jobs[0].identity)
    assert row["duplicate_lines"] == "[9]" and row["status"] == "done"
    ledger.close()


def test_running_mark_is_committed_before_the_job_starts(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    job = _job(1)
    ledger.add_jobs(iter([job]))
    ledger.mark_running(job, job.run_id, "w")
    other = sqlite3.connect(tmp_path / "ledger.sqlite")  # another process's view, as after a crash
    assert other.execute("SELECT status, attempts FROM jobs").fetchone() == ("running", 1)
    other.close()
    assert ledger.stale_running() == [(job.identity, job.run_id, True)]
    ledger.reset(job.identity, status="ambiguous", message="m")
    assert ledger.failures()[0]["category"] == "ambiguous_execution"
    ledger.close()
