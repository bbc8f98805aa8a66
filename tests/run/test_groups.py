"""A batch's reward groups: scored jobs that share a trajectory and a boundary form one group in `batch status`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint.batch import BatchOptions, run_batch, status
from forkpoint.run.scoring import group_id
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use


def test_scored_jobs_sharing_trajectory_and_boundary_form_one_group(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    builder = ClaudeSessionBuilder(cwd=str(source))
    builder.user_prompt("two steps")
    builder.assistant([tool_use("t1", "Bash", {"command": "echo one > a.txt"})])
    builder.results({"t1": ""})
    builder.assistant([tool_use("t2", "Bash", {"command": "echo two > b.txt"})])
    builder.results({"t2": ""})
    builder.assistant([text("done")])
    session = builder.write(tmp_path / "s.jsonl")
    base = {"trajectory": str(session), "mode": "replay-only", "workspace_from": str(source)}
    rows = [{**base, "after_step": 1, "score": "test -f a.txt"},  # 1.0
            {**base, "after_step": 1, "score": "test -f b.txt", "original_reward": 1},  # 0.0
            {**base, "after_step": 1, "score": {"command": "echo '{\"reward\": 0.5}'", "format": "json"}},
            {**base, "after_step": 2, "score": "sleep 5", "score_timeout": 0.5}]  # a score failure, its own group
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    summary = run_batch(jobs, tmp_path / "batch", BatchOptions(workers=2))
    assert summary["counts"]["done"] == 4, summary["failed"]
    groups = {group["id"]: group for group in status(tmp_path / "batch")["groups"]}
    digest = json.loads(next((tmp_path / "batch" / "runs").glob("*/result.json")).read_text())[
        "metadata"]["source_sha256"]
    first, second = groups[group_id(digest, 1)], groups[group_id(digest, 2)]
    assert (first["n"], first["mean"], first["original_reward"], first["equal_to_original"]) == (3, 0.5, 1.0, 1)
    assert first["pass_at_k"]["1"] == pytest.approx(2 / 3) and first["std"] == pytest.approx((1 / 6) ** 0.5)
    assert (second["n"], second["unscored"], second["mean"]) == (0, 1, None)
