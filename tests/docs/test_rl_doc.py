"""docs/rl.md's worked example runs as written: its commands (the block between the rl-example markers), through the
real CLI, the real Claude Code 2.1.332 and ScriptedModel as the upstream. This is also the Claude Code end-to-end
test of scoring (the Chat agent's is tests/e2e/test_rl.py): K=4 branches make different edits to a tiny repo with a
test, the verifier `python3 -m pytest -q` scores each branch's own final workspace 1 or 0, branches.json holds the
group and its advantages, the DPO pair loads with `datasets`, the report shows each branch's bridge and reward."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import holding, recorded_cwd
from forkpoint.testing.scripted_model import text, tool_use

ROOT = Path(__file__).parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "claude_code" / "2.1.332" / "file_tools"
BRANCHES = {0.11: "alpha", 0.22: "bravo", 0.33: "charlie", 0.44: None}


def _example() -> str:
    page = (ROOT / "docs" / "rl.md").read_text()
    block = re.search(r"<!-- rl-example -->\n```sh\n(.*?)```\n<!-- /rl-example -->", page, re.S)
    assert block is not None, "docs/rl.md lost its rl-example block"
    return block.group(1)


@pytest.mark.e2e
def test_the_worked_example_runs_as_written(tmp_path: Path) -> None:
    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed (forkpoint agents install claude-code@2.1.332)")
    base = json.loads((FIXTURE / "script.json").read_text())["turns"]
    keyed: dict[str, Sequence[Any]] = {}
    for temperature, name in BRANCHES.items():
        action = [text("nothing to change")] if name is None else [
            tool_use("Bash", {"command": f"echo {name} > branch.txt"})]
        keyed[f'"temperature": {temperature}'] = [*base[:2], action, [text(f"{name} done")]]
    shutil.copytree(FIXTURE / "workspace-initial", tmp_path / "repo")
    (tmp_path / "repo" / "test_branch.py").write_text(
        'def test_the_branch_fixed_it():\n    assert open("branch.txt").read().strip() in ("alpha", "charlie")\n')
    bin_dir = tmp_path / "bin"  # `forkpoint` as the page spells it: this checkout's CLI
    bin_dir.mkdir()
    (bin_dir / "forkpoint").write_text(f"#!/bin/sh\nexec {sys.executable} -m forkpoint.cli \"$@\"\n")
    (bin_dir / "forkpoint").chmod(0o755)
    workspace = recorded_cwd(FIXTURE)
    with holding(workspace), ScriptedModel(base, keyed=keyed).serve() as url:
        shutil.rmtree(workspace, ignore_errors=True)  # the example creates it (--workspace-from)
        try:
            env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "REC": str(FIXTURE),
                   "WS": str(workspace), "ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "scripted-upstream-key"}
            done = subprocess.run(["bash", "-euo", "pipefail", "-c", _example()], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=600)
        finally:
            shutil.rmtree(workspace, ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "score: reward 0 (exit 1" in done.stdout
    assert "n 4, mean 0.5, std 0.5, pass@1 0.50, pass@2 0.83" in done.stdout
    assert "original reward 0 (equal in 2 of 4)" in done.stdout
    pairs = [json.loads(line) for line in (tmp_path / "pairs.jsonl").read_text().splitlines()]
    assert len(pairs) == 1 and (pairs[0]["chosen_branch"], pairs[0]["rejected_branch"]) == (1, 2)
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert [row["reward"] for row in rows] == [1.0, 0.0, 1.0, 0.0] and rows[0]["original_reward"] == 0.0
    _check_branches(tmp_path / "forkpoint-out" / "runs" / "branched", pairs[0], tmp_path)


def _check_branches(out: Path, pair: dict[str, Any], tmp_path: Path) -> None:
    document = json.loads((out / "branches.json").read_text())
    rows = {row["branch"]: row for row in document["branches"]}
    assert all(rows[i]["score"]["failure"] is None and rows[i]["score"]["exit"] == (i % 2 == 0) for i in rows)
    assert rows[1]["files_changed"]["added"] == ["branch.txt"]  # scored after: pytest's own files are not the agent's
    group = document["group"]
    assert (group["n"], group["mean"], group["std"], group["pass_at_k"]["3"], group["equal_to_original"]) == (
        4, 0.5, 0.5, 1.0, 2)
    assert {i: (rows[i]["group"]["advantage"], rows[i]["group"]["advantage_grpo"]) for i in rows} == {
        1: (0.5, 1.0), 2: (-0.5, -1.0), 3: (0.5, 1.0), 4: (-0.5, -1.0)}
    assert len({rows[i]["group"]["id"] for i in rows}) == 1
    assert json.loads((out / "result.json").read_text())["metadata"]["branches"]["group"] == group
    assert pair["prompt"][0]["role"] == "user" and pair["chosen"][0]["role"] == "assistant"
    assert "echo alpha" in json.dumps(pair["chosen"]) and "echo bravo" in json.dumps(pair["rejected"])
    import datasets

    loaded = datasets.load_dataset("json", data_files=str(tmp_path / "pairs.jsonl"), split="train",
                                   cache_dir=str(tmp_path / "hf"))
    assert loaded.column_names[:3] == ["prompt", "chosen", "rejected"] and loaded.num_rows == 1
    from forkpoint.report import write_report

    write_report([out], tmp_path / "report.html")
    html = (tmp_path / "report.html").read_text()
    assert "validated the first request of 4 of 4 branches" in html and "not started" not in html
    assert "assistant: alpha done" in html and "1.0 (exit 0" in html  # branch 1's live turns, its reward
