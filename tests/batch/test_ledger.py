"""The SQLite ledger: WAL, one row per identity, the job life cycle, what a stale `running` row becomes, the work
a duplicate line costs, and the refusal of links, special files and foreign or corrupt databases."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from forkpoint.batch.jobs import Job
from forkpoint.batch.ledger import Ledger, LedgerError, Outcome


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


def _sql_bytes_to_note_duplicates(root: Path, count: int) -> int:
    """The SQL (parameters expanded) the ledger executes to record one job and ``count`` later lines repeating it,
    fed in chunks of 32 lines like the driver does: the work a duplicate costs."""
    ledger = Ledger(root / f"dup-{count}.sqlite")
    shipped = 0

    def count_statement(statement: str) -> None:
        nonlocal shipped
        shipped += len(statement)

    first = _job(1)
    ledger.add_jobs(iter([first]))
    ledger.db.set_trace_callback(count_statement)
    lines = [Job(**{**first.__dict__, "line": line}) for line in range(2, count + 2)]
    for start in range(0, count, 32):
        ledger.add_jobs(iter(lines[start:start + 32]))
    ledger.db.set_trace_callback(None)
    (row,) = list(ledger.jobs())
    assert json.loads(row["duplicate_lines"]) == list(range(2, count + 2))
    ledger.close()
    return shipped


def test_a_duplicate_line_costs_constant_work_however_many_came_before(tmp_path: Path) -> None:
    """16k repeated lines took 18 s and 84k over 11 minutes: each duplicate rewrote the job's whole list of
    duplicate lines. Counted, not timed: 4x the duplicates must cost at most ~4x the SQL."""
    small, large = _sql_bytes_to_note_duplicates(tmp_path, 1000), _sql_bytes_to_note_duplicates(tmp_path, 4000)
    assert large / small < 4.5, (small, large)
    assert small / 1000 < 400  # bytes of SQL per duplicate line: a lookup and one small insert


def test_duplicate_lines_of_a_ledger_written_before_the_duplicates_table_are_kept(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.sqlite")
    job = _job(1)
    ledger.add_jobs(iter([job]))
    ledger.db.execute("UPDATE jobs SET duplicate_lines = '[4, 7]'")  # the old format: a JSON list in the row
    assert ledger.add_jobs(iter([Job(**{**job.__dict__, "line": 9}), job])) == (0, 1)
    (row,) = list(ledger.jobs())
    assert row["duplicate_lines"] == "[4, 7, 9]"
    ledger.close()


def _foreign_database(path: Path) -> bytes:
    other = sqlite3.connect(path)
    other.execute("CREATE TABLE contacts (name TEXT)")
    other.execute("INSERT INTO contacts VALUES ('ada')")
    other.commit()
    other.close()
    return path.read_bytes()


def test_a_ledger_that_is_a_link_or_not_a_regular_file_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    other = tmp_path / "app.sqlite"
    before = _foreign_database(other)
    text_file = tmp_path / "notes.txt"
    text_file.write_text("not a database\n")
    cases: list[tuple[str, str]] = []
    for name, plant in (
        ("symlink-db", lambda ledger: ledger.symlink_to(other)),
        ("symlink-text", lambda ledger: ledger.symlink_to(text_file)),
        ("hardlink-db", lambda ledger: os.link(other, ledger)),
        ("fifo", lambda ledger: os.mkfifo(ledger)),
        ("directory", lambda ledger: ledger.mkdir()),
        ("wal-link", lambda ledger: ledger.with_name("ledger.sqlite-wal").symlink_to(text_file)),
        ("shm-link", lambda ledger: ledger.with_name("ledger.sqlite-shm").symlink_to(text_file)),
        ("journal-link", lambda ledger: ledger.with_name("ledger.sqlite-journal").symlink_to(other)),
    ):
        folder = tmp_path / name
        folder.mkdir()
        plant(folder / "ledger.sqlite")
        with pytest.raises(LedgerError) as refused:
            Ledger(folder / "ledger.sqlite").close()
        assert refused.value.kind.category == "output_error" and str(folder) in refused.value.message
        cases.append((name, refused.value.message))
    assert other.read_bytes() == before and text_file.read_text() == "not a database\n"
    check = sqlite3.connect(other)
    assert check.execute("SELECT name FROM sqlite_master").fetchall() == [("contacts",)]
    assert check.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    check.close()
    assert not any(tmp_path.glob("app.sqlite-*")) and len(cases) == 8


def test_a_corrupt_or_foreign_ledger_is_a_typed_refusal_naming_it_left_untouched(tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt" / "ledger.sqlite"
    corrupt.parent.mkdir()
    corrupt.write_bytes(b"SQLite format 3\x00" + b"\xff" * 200)
    foreign = tmp_path / "foreign" / "ledger.sqlite"
    foreign.parent.mkdir()
    for path in (corrupt, foreign):
        before = path.read_bytes() if path.exists() else _foreign_database(path)
        with pytest.raises(LedgerError) as refused:
            Ledger(path).close()
        assert str(path) in refused.value.message and refused.value.kind.exit_code == 21
        assert path.read_bytes() == before


def test_the_cli_refuses_a_linked_ledger_typed_for_batch_and_status(tmp_path: Path) -> None:
    other = tmp_path / "app.sqlite"
    before = _foreign_database(other)
    batch = tmp_path / "batch"
    batch.mkdir()
    (batch / "ledger.sqlite").symlink_to(other)
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("")
    for argv in (["batch", str(jobs), "--out", str(batch)], ["batch", "status", str(batch)]):
        done = subprocess.run([sys.executable, "-m", "forkpoint.cli", *argv], capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 21, done.stderr
        assert "output_error" in done.stderr and f"{batch}/ledger.sqlite" in done.stderr
        assert "Traceback" not in done.stderr
    assert other.read_bytes() == before
