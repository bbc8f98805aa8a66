"""A batch job whose agent's tools must see the recorded path (mini-swe-agent: no --path-map) works in the recorded
cwd itself. It never changes or leaves anything in a folder forkpoint did not create: an existing folder there (an
empty 0700 one too) is refused, not chmod-ed and filled; for a new path every folder it created, missing parents
included, is gone after the job — and after a job killed inside it, at the next driver's start. Run through the
real `forkpoint batch` CLI, effects observed on the folders."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).parents[1] / "fixtures" / "mini_swe_agent" / "2.4.6" / "basic"


def _job(tmp_path: Path, cwd: Path, name: str) -> dict[str, object]:
    """The real mini-swe-agent 2.4.6 recording, recorded (as its config says) in ``cwd``."""
    document = json.loads((FIXTURE / "trajectory.traj.json").read_text())
    document["info"]["config"]["environment"]["cwd"] = str(cwd)
    trajectory = tmp_path / f"{name}.traj.json"
    trajectory.write_text(json.dumps(document))
    return {"trajectory": str(trajectory), "agent": "mini-swe-agent", "after_step": 1, "mode": "replay-only",
            "workspace_from": str(FIXTURE / "workspace-initial")}


def _batch(tmp_path: Path, *jobs: dict[str, object]) -> dict[str, object]:
    lines = tmp_path / "jobs.jsonl"
    lines.write_text("".join(json.dumps(job) + "\n" for job in jobs))
    done = subprocess.run([sys.executable, "-m", "forkpoint.cli", "batch", str(lines), "--out", str(tmp_path / "b"),
                           "--json"], capture_output=True, text=True, timeout=600)
    summary: dict[str, object] = json.loads(done.stdout.splitlines()[-1])
    return summary


def test_an_existing_empty_private_folder_at_the_recorded_cwd_is_refused_unchanged(tmp_path: Path) -> None:
    """Before: its mode became 0755 (cp -a copied the source's) and the replayed workspace stayed in it."""
    existing = tmp_path / "existing"
    existing.mkdir(mode=0o700)
    os.chmod(existing, 0o700)
    summary = _batch(tmp_path, _job(tmp_path, existing, "existing"))
    assert stat.S_IMODE(os.stat(existing).st_mode) == 0o700
    assert list(existing.iterdir()) == []
    failed = summary["failed"]
    assert isinstance(failed, list) and len(failed) == 1 and "exists" in str(failed[0]), summary


def test_a_new_recorded_cwd_and_the_parents_created_for_it_are_gone_after_the_job(tmp_path: Path) -> None:
    """Before: the recorded cwd was removed but the parent folders created for it stayed."""
    (tmp_path / "keep").mkdir()
    recorded = tmp_path / "keep" / "new" / "a" / "b"
    summary = _batch(tmp_path, _job(tmp_path, recorded, "new"))
    assert summary["counts"] == {"done": 1, "failed": 0, "ambiguous": 0, "pending": 0, "running": 0}, summary
    assert list((tmp_path / "keep").iterdir()) == []  # the existing parent is left as it was: empty


def test_what_a_killed_job_created_is_removed_by_the_next_driver(tmp_path: Path) -> None:
    """A job killed (SIGKILL) while it held a recorded path it created leaves it behind; the next driver's start
    removes it (its record names it by device and inode) and a job can work there again."""
    (tmp_path / "keep").mkdir()
    recorded = tmp_path / "keep" / "killed" / "cwd"
    batch = tmp_path / "b"
    batch.mkdir()
    code = ("import os, sys; from pathlib import Path; from forkpoint.batch import worker; "
            "lock = worker._path_lock(Path(sys.argv[1]), Path(sys.argv[2])); record = lock.__enter__(); "
            "worker._create_recorded(Path(sys.argv[2]), record); (Path(sys.argv[2]) / 'half.txt').write_text('x'); "
            "os.kill(os.getpid(), 9)")
    killed = subprocess.run([sys.executable, "-c", code, str(batch), str(recorded)], timeout=60)
    assert killed.returncode == -9 and (recorded / "half.txt").is_file()
    summary = _batch(tmp_path, _job(tmp_path, recorded, "again"))
    assert summary["counts"]["done"] == 1, summary  # type: ignore[index]
    assert list((tmp_path / "keep").iterdir()) == []
