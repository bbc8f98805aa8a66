"""Scored branch jobs for a batch: J jobs × K branches of the real Claude Code 2.1.332 against ScriptedModel, run on
the local pool or on Ray (tests/batch/test_rl_batch.py runs a few, benchmarks/rl_batch.py runs 50 × K).

The recording is the committed fixture ``claude_code/2.1.332/single_bash`` (2 tool batches). Job ``i`` continues
after batch ``1 + i % 2`` (so the batch has two reward groups) with K branches; each branch gets its own sampling
temperature (``branch_temperatures``, three decimals, unique in the batch: it also makes every job's identity its
own), and ScriptedModel answers each temperature with its own script: write the branch's reward into
``branch.txt``, or change nothing. The verifier ``cat branch.txt`` then reads the reward as its last line (a branch
that wrote nothing: exit 1, reward 0.0). So every (job, branch) has a reward known in advance, and the groups mix
rewards 1, 0.5, 0.25 and 0.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from forkpoint.testing import ScriptedModel
from forkpoint.testing.scripted_model import text, tool_use

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "claude_code" / "2.1.332" / "single_bash"
AGENT, VERSION = "claude-code", "2.1.332"
VERIFIER = "cat branch.txt"
#: what branch k of job i writes, rotated by i (None: the branch changes nothing, its verifier exits 1)
REWARDS: tuple[float | None, ...] = (1.0, 0.5, None, 0.25)


def boundary(job: int) -> int:
    return 1 + job % 2


def temperature(job: int, branch: int, branches: int) -> float:
    """Unique per (job, branch), exactly three decimals without a trailing zero (so no key is a prefix of
    another in ScriptedModel's substring match): 0.101, 0.102, …, 0.109, 0.111, …"""
    index = job * branches + branch
    value = 101 + index + index // 9  # skips the multiples of 10
    if value >= 1000:
        raise ValueError("at most 810 branches in one batch")
    return value / 1000


def reward(job: int, branch: int) -> float | None:
    return REWARDS[(job + branch) % len(REWARDS)]


def expected_reward(job: int, branch: int) -> float:
    """The reward the verifier gives branch ``branch`` of job ``job``."""
    value = reward(job, branch)
    return 0.0 if value is None else value


def model(jobs: int, branches: int) -> ScriptedModel:
    """ScriptedModel answering every branch of the batch by its temperature."""
    base = json.loads((FIXTURE / "script.json").read_text())["turns"]
    keyed: dict[str, Sequence[Any]] = {}
    for job in range(jobs):
        for branch in range(branches):
            value = reward(job, branch)
            action = [text("nothing to change")] if value is None else [
                tool_use("Bash", {"command": f"echo {value} > branch.txt"})]
            keyed[f'"temperature": {temperature(job, branch, branches)}'] = [
                *base[:boundary(job)], action, [text(f"job {job} branch {branch} done")]]
    return ScriptedModel(base, keyed=keyed)


def jobs_file(path: Path, jobs: int, branches: int, url: str) -> Path:
    """The jobs file: each job's trajectory, boundary, branches and verifier; the workspace is the fixture's."""
    rows = [{"trajectory": str(FIXTURE / "session.jsonl"), "agent": AGENT, "after_step": boundary(job),
             "mode": "continue", "upstream": "anthropic", "upstream_url": url,
             "workspace_from": str(FIXTURE / "workspace-initial"), "branches": branches,
             "branch_temperatures": [temperature(job, branch, branches) for branch in range(branches)],
             "score": VERIFIER} for job in range(jobs)]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def rewards(batch: Path) -> dict[tuple[int, int], float | None]:
    """(job line - 1, branch - 1) -> the branch's recorded reward, from each done job's branches.json."""
    import sqlite3

    db = sqlite3.connect(f"file:{batch / 'ledger.sqlite'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT line, run_id FROM jobs WHERE status = 'done'").fetchall()
    finally:
        db.close()
    found: dict[tuple[int, int], float | None] = {}
    for line, run_id in rows:
        document = json.loads((batch / "runs" / run_id / "branches.json").read_text())
        for row in document["branches"]:
            found[(line - 1, row["branch"] - 1)] = (row.get("score") or {}).get("reward")
    return found


def expected(jobs: int, branches: int) -> dict[tuple[int, int], float]:
    return {(job, branch): expected_reward(job, branch) for job in range(jobs) for branch in range(branches)}
