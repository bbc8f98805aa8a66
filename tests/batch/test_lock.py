"""One driver per batch dir and per-job leases, with real `forkpoint batch` driver processes: a second driver is
refused naming the first (also when both start at once) and the first's slow job finishes with its result intact;
a job whose lease a live process still holds is never settled; a worker sent by a driver that no longer holds the
batch dir starts nothing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from forkpoint.batch import BatchOptions, run_batch, status
from forkpoint.batch.expand import expand
from forkpoint.batch.jobs import Job, read_lines
from forkpoint.batch.ledger import Ledger
from forkpoint.batch.lock import job_lease, lock_batch_dir
from forkpoint.batch.worker import run_job
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use


def _gated_batch(root: Path) -> tuple[Path, Path]:
    """A one-job replay-only batch whose replayed command notes that it started, then waits for ``root/go`` (the
    test decides when the job may finish) and appends to ``root/marker`` (one line per execution)."""
    source = root / "src"
    source.mkdir()
    (source / "data.txt").write_text("data\n")
    builder = ClaudeSessionBuilder(session_id="00000001-0000-4000-8000-000000000001", cwd=str(source))
    builder.user_prompt("Wait, mark, read.")
    command = (f"touch {root}/started; while [ ! -e {root}/go ]; do sleep 0.02; done; "
               f"echo run >> {root}/marker && cat data.txt")
    builder.assistant([text("mark"), tool_use("toolu_0001", "Bash", {"command": command})])
    builder.results({"toolu_0001": "data"})
    builder.assistant([text("Done.")])
    session = builder.write(root / "session.jsonl")
    jobs = root / "jobs.jsonl"
    jobs.write_text(json.dumps({"trajectory": str(session), "after_step": 1, "mode": "replay-only",
                                "workspace_from": str(source)}) + "\n")
    return jobs, root / "batch"


def _driver(jobs: Path, batch: Path) -> list[str]:
    return [sys.executable, "-m", "forkpoint.cli", "batch", str(jobs), "--out", str(batch), "--workers", "1"]


def _wait_for(path: Path, process: subprocess.Popen[str] | None = None) -> None:
    deadline = time.monotonic() + 120
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        assert process is None or process.poll() is None, process.communicate()
        time.sleep(0.02)


def _assert_intact(root: Path, batch: Path) -> None:
    """The job ran once, and its ledger row and run outputs say so."""
    assert (root / "marker").read_text() == "run\n"
    summary = status(batch)
    assert summary["counts"]["done"] == 1 and summary["jobs"] == 1, summary
    ledger = Ledger(batch / "ledger.sqlite")
    (row,) = list(ledger.jobs())
    ledger.close()
    result = json.loads((batch / "runs" / row["run_id"] / "result.json").read_text())
    assert result["phase"] == "replayed" and result["observations_match"] == "exact"


def test_a_second_driver_is_refused_naming_the_first_whose_running_job_finishes_intact(tmp_path: Path) -> None:
    jobs, batch = _gated_batch(tmp_path)
    first = subprocess.Popen(_driver(jobs, batch), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(tmp_path / "started", first)  # the first driver's job is running its tool
        assert status(batch)["counts"]["running"] == 1
        ledger = Ledger(batch / "ledger.sqlite")
        (run_id,) = [job["run_id"] for job in ledger.jobs()]
        ledger.close()
        second = subprocess.run(_driver(jobs, batch), capture_output=True, text=True, timeout=300)
        assert second.returncode == 21, second.stderr  # output_error, typed
        assert "Traceback" not in second.stderr
        assert f"in use by forkpoint batch driver pid {first.pid} " in second.stderr, second.stderr
        assert status(batch)["counts"]["running"] == 1  # not settled by the second driver
        assert (batch / "work" / run_id / "ws").is_dir() and (batch / "state" / run_id / "journal.jsonl").is_file()
        (tmp_path / "go").touch()
        _, stderr = first.communicate(timeout=300)
    finally:
        (tmp_path / "go").touch()
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, stderr
    _assert_intact(tmp_path, batch)


def test_two_drivers_started_at_once_one_runs_the_other_is_refused_typed(tmp_path: Path) -> None:
    jobs, batch = _gated_batch(tmp_path)
    batch.mkdir()  # both race for the lock (and, before it existed, for the ledger's creation)
    drivers = [subprocess.Popen(_driver(jobs, batch), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(2)]
    try:
        _wait_for(tmp_path / "started")  # one driver's job runs; it cannot finish before the test creates go
        deadline = time.monotonic() + 120
        while all(driver.poll() is None for driver in drivers):  # so the first to exit is the refused one
            assert time.monotonic() < deadline, "neither driver was refused"
            time.sleep(0.02)
        (tmp_path / "go").touch()
        outputs = [d.communicate(timeout=300) for d in drivers]
    finally:
        (tmp_path / "go").touch()
        for driver in drivers:
            if driver.poll() is None:
                driver.kill()
                driver.wait()
    codes = sorted(d.returncode for d in drivers)
    assert codes == [0, 21], outputs
    loser = next(i for i, d in enumerate(drivers) if d.returncode == 21)
    winner = drivers[1 - loser]
    assert "Traceback" not in outputs[loser][1] and "database is locked" not in outputs[loser][1]
    assert f"in use by forkpoint batch driver pid {winner.pid} " in outputs[loser][1], outputs[loser][1]
    _assert_intact(tmp_path, batch)


def test_a_job_whose_lease_is_held_is_left_running_and_untouched(tmp_path: Path) -> None:
    """A stopped driver's job still alive in some process (here: this test holds its lease, as the orphaned worker
    would): the next driver neither deletes its work nor re-runs or settles it; once the lease is free it does."""
    jobs, batch = _gated_batch(tmp_path)
    (tmp_path / "go").touch()
    first = run_batch(jobs, batch, BatchOptions(workers=1))
    assert first["counts"]["done"] == 1
    ledger = Ledger(batch / "ledger.sqlite")
    ledger.db.execute("UPDATE jobs SET status = 'pending', attempts = 0")
    job = next(job for _, job, _ in ledger.runnable(3, 1))
    ledger.mark_running(job, job.run_id, "lost-driver")  # what a driver killed before the job's first tool leaves
    ledger.close()
    for folder in ("runs", "state"):
        shutil.rmtree(batch / folder / job.run_id)
    (tmp_path / "marker").unlink()
    planted = batch / "work" / job.run_id / "ws" / "alive.txt"
    planted.parent.mkdir(parents=True)
    planted.write_text("the orphan is still working here\n")
    with job_lease(batch, job.run_id, None):
        again = run_batch(jobs, batch, BatchOptions(workers=1))
        assert again["still_running_elsewhere"] == [job.run_id]
        assert again["counts"]["running"] == 1 and planted.read_text() == "the orphan is still working here\n"
        assert not (tmp_path / "marker").exists()
    settled = run_batch(jobs, batch, BatchOptions(workers=1))  # the lease is free: settled by its journal, re-run
    assert settled["still_running_elsewhere"] == [] and settled["counts"]["done"] == 1
    assert not planted.exists() and (tmp_path / "marker").read_text() == "run\n"
    assert not (batch / "leases").exists() or list((batch / "leases").iterdir()) == []


def test_a_worker_sent_by_a_driver_that_lost_the_batch_dir_starts_nothing(tmp_path: Path) -> None:
    jobs, batch = _gated_batch(tmp_path)
    (tmp_path / "go").touch()
    batch.mkdir()
    (job,) = [item for item in expand(read_lines(jobs, {})) if isinstance(item, Job)]
    with lock_batch_dir(batch, jobs) as held:  # the current driver
        outcome = run_job(job.to_json(), str(batch), job.run_id, "token-of-a-dead-driver")
        assert outcome["category"] == "output_error" and "no longer holds" in outcome["message"]
        assert not (tmp_path / "started").exists() and not (batch / "work" / job.run_id).exists()
        ran = run_job(job.to_json(), str(batch), job.run_id, held.token)
    assert ran["exit_code"] == 0, ran
    assert (tmp_path / "marker").read_text() == "run\n"


def test_a_symlinked_or_special_lock_file_is_refused(tmp_path: Path) -> None:
    batch = tmp_path / "batch"
    batch.mkdir()
    target = tmp_path / "victim"
    target.write_text("someone else's file\n")
    (batch / "driver.lock").symlink_to(target)
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("")
    done = subprocess.run([sys.executable, "-m", "forkpoint.cli", "batch", str(jobs), "--out", str(batch)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 21 and "batch lock" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert target.read_text() == "someone else's file\n"
    (batch / "driver.lock").unlink()
    os.mkfifo(batch / "driver.lock")
    done = subprocess.run([sys.executable, "-m", "forkpoint.cli", "batch", str(jobs), "--out", str(batch)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 21 and "not a regular file" in done.stderr, done.stderr
