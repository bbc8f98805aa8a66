"""`forkpoint gc` removes only what forkpoint made: a crafted result.json naming another folder as its state dir
cannot make it delete that folder's `snapshot/` or `branches/*/workspace`."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.branching import SNAPSHOT_SCHEMA
from forkpoint.resume import collect_snapshots


def _run_dir(tmp_path: Path, state: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "result.json").write_text(json.dumps({"state_dir": str(state)}))
    return run


def test_gc_removes_a_real_snapshot_and_branch_copies(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "snapshot" / "workspace").mkdir(parents=True)
    (state / "snapshot" / "workspace" / "f").write_text("x" * 5000)
    (state / "snapshot" / "snapshot.json").write_text(json.dumps({"schema_version": SNAPSHOT_SCHEMA}))
    (state / "branches" / "1" / "workspace").mkdir(parents=True)
    (state / "branches" / "1" / "journal.jsonl").write_text("")
    freed = collect_snapshots(_run_dir(tmp_path, state))
    assert freed["bytes"] >= 5000 and len(freed["removed"]) == 2
    assert not (state / "snapshot").exists() and not (state / "branches" / "1" / "workspace").exists()


def test_gc_leaves_folders_forkpoint_did_not_make(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    (victim / "snapshot").mkdir(parents=True)
    (victim / "snapshot" / "precious.txt").write_text("keep")
    (victim / "branches" / "x" / "workspace").mkdir(parents=True)
    freed = collect_snapshots(_run_dir(tmp_path, victim))
    assert freed["removed"] == []
    assert (victim / "snapshot" / "precious.txt").read_text() == "keep"
    assert (victim / "branches" / "x" / "workspace").is_dir()
