"""Reward groups across runs (I/O): every scored continuation that shares a trajectory digest and a boundary.

A group id (``forkpoint.run.scoring.group_id``) is the same in every run of that trajectory and boundary, so a
batch's groups are the runs' scored continuations collected by id: a branched job's branches (branches.json),
a single continuation's or replay's own score (result.json, ``metadata.scoring.group_id``). `forkpoint batch
status` shows a batch's groups, `forkpoint export` computes its advantages over the groups of the runs it exports.
The run documents are read bounded; one that cannot be read is left out of the groups.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from forkpoint.core.errors import ReplayError
from forkpoint.core.results import read_document
from forkpoint.run.scoring import group_summary, reward_of


def run_rewards(run_dir: Path) -> tuple[str, list[float | None], float | None] | None:
    """(group id, the rewards of the run's scored continuations, the original's reward), or None when the run was
    not scored."""
    try:
        result = read_document(run_dir / "result.json")
        branches = read_document(run_dir / "branches.json")
    except ReplayError:
        return None
    if result is None:
        return None
    metadata = result.get("metadata")
    scoring = metadata.get("scoring") if isinstance(metadata, dict) else None
    if not isinstance(scoring, dict) or not isinstance(scoring.get("group_id"), str):
        return None
    original = scoring.get("original_reward")
    original = float(original) if isinstance(original, int | float) and not isinstance(original, bool) else None
    if branches is not None and isinstance(branches.get("branches"), list):
        rows = [row for row in branches["branches"] if isinstance(row, dict) and isinstance(row.get("score"), dict)]
        return scoring["group_id"], [reward_of(row["score"]) for row in rows], original
    if isinstance(result.get("score"), dict):
        return scoring["group_id"], [reward_of(result["score"])], original
    return None


def batch_groups(run_dirs: Iterable[Path]) -> list[dict[str, Any]]:
    """One group table per group id, in the order the groups were first seen."""
    return [group_summary(gid, rewards, original) for gid, (rewards, original) in collect_groups(run_dirs).items()]


def collect_groups(run_dirs: Iterable[Path]) -> dict[str, tuple[list[float | None], float | None]]:
    """Group id -> (the rewards of its scored continuations, the original's reward when a run gave it)."""
    collected: dict[str, tuple[list[float | None], list[float]]] = {}
    for run_dir in run_dirs:
        found = run_rewards(run_dir)
        if found is None:
            continue
        gid, rewards, original = found
        into = collected.setdefault(gid, ([], []))
        into[0].extend(rewards)
        if original is not None:
            into[1].append(original)
    return {gid: (rewards, originals[0] if originals else None) for gid, (rewards, originals) in collected.items()}
