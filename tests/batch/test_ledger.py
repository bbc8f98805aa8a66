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


def test_usage_is_summed_over_a_jobs_attempts_and_over_the_batch(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    jobs = [_job(1, "continue"), _job(2, "continue")]
    ledger.add_jobs(iter(jobs))
    spent = Outcome.usage_of({"calls": 3, "input_tokens": 1200, "output_tokens": 90, "cached_tokens": 800,
                              "reasoning_tokens": 10, "calls_with_usage": 3})
    ledger.mark_running(jobs[0], jobs[0].run_id, "w")
    ledger.finish(Outcome(**{**_outcome(jobs[0], 40, "model_rate_limit", retryable=True).to_json(), **spent}))
    ledger.mark_running(jobs[0], jobs[0].run_id + "-a2", "w")
    ledger.finish(Outcome(**{**_outcome(jobs[0], 0).to_json(), **spent}))  # the retry paid again
    ledger.mark_running(jobs[1], jobs[1].run_id, "w")
    ledger.finish(_outcome(jobs[1], 0))  # no model call (the Outcome's defaults)
    rows = {row["identity"]: row for row in ledger.jobs()}
    assert (rows[jobs[0].identity]["model_calls"], rows[jobs[0].identity]["input_tokens"]) == (6, 2400)
    assert rows[jobs[1].identity]["model_calls"] == 0
    assert ledger.usage() == {"model_calls": 6, "input_tokens": 2400, "output_tokens": 180, "cached_tokens": 1600,
                              "reasoning_tokens": 20}
    ledger.close()


def test_hostile_usage_counts_read_as_zero() -> None:
    assert Outcome.usage_of({"calls": -1, "input_tokens": "9", "output_tokens": True, "cached_tokens": 2.5}) == {
        "model_calls": 0, "input_tokens": 0, "output_tokens": 0, "cached_tokens": 0, "reasoning_tokens": 0}
    assert Outcome.usage_of(None) == Outcome.usage_of(["not", "a", "dict"]) == Outcome.usage_of({})


def test_a_ledger_from_before_the_usage_columns_gets_them_and_keeps_its_jobs(tmp_path: Path) -> None:
    path = tmp_path / "ledger.sqlite"
    old = sqlite3.connect(path)
    old.execute("CREATE TABLE jobs (identity TEXT PRIMARY KEY, ordinal INTEGER NOT NULL, line INTEGER NOT NULL, "
                "duplicate_lines TEXT NOT NULL, spec TEXT NOT NULL, agent TEXT NOT NULL, mode TEXT NOT NULL, "
                "after_step INTEGER NOT NULL, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0, run_id TEXT, "
                "effects INTEGER NOT NULL, exit_code INTEGER, category TEXT, retryable INTEGER, message TEXT, "
                "phase TEXT, quality TEXT, agent_status TEXT, started_at REAL, finished_at REAL, seconds REAL, "
                "worker TEXT)")
    old.execute("INSERT INTO jobs (identity, ordinal, line, duplicate_lines, spec, agent, mode, after_step, status, "
                "effects) VALUES ('a', 1, 1, '[]', '{}', 'claude-code', 'continue', 1, 'done', 1)")
    old.commit()
    old.close()
    ledger = Ledger(path)
    [row] = list(ledger.jobs())
    assert row["status"] == "done" and row["model_calls"] == 0 and row["input_tokens"] == 0
    assert ledger.usage()["model_calls"] == 0
    ledger.close()
    Ledger(path).close()  # opening it again changes nothing
