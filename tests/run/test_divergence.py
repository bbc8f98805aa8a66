"""--on-divergence: a real Claude Code recording replayed in a workspace altered before the replay (one call
diverges) under each policy, and replayed unaltered (no warning); the CLI's stderr and exit code, result.json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.run.divergence import observations_match, summary, warning_lines
from forkpoint.testing.recordings import restored_workspace

FIXTURE = Path(__file__).parents[1] / "fixtures" / "claude_code" / "2.1.332" / "parallel"


def _replay(tmp_path: Path, *options: str, alter: bool) -> tuple[subprocess.CompletedProcess[str], dict]:
    with restored_workspace(FIXTURE) as workspace:
        if alter:
            (workspace / "a.txt").write_text("ALPHA, altered before the replay\n")
        done = subprocess.run(
            [sys.executable, "-m", "forkpoint.cli", "replay", "--agent", "claude-code", "--trajectory",
             str(FIXTURE / "session.jsonl"), "--after-step", "1", "--workspace", str(workspace), "--output-dir",
             str(tmp_path / "out"), "--state-dir", str(tmp_path / "state"), "--run-id", "r", *options],
            capture_output=True, text=True, timeout=300)
    return done, json.loads((tmp_path / "out" / "r" / "result.json").read_text())


def test_warn_prints_a_line_per_diverging_call_and_goes_on(tmp_path: Path) -> None:
    done, result = _replay(tmp_path, "--replay-only", alter=True)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if "divergence:" in line]
    assert len(lines) == 1 and "Bash, batch 1" in lines[0] and "+ALPHA, altered before the replay" in lines[0]
    assert result["observations_match"] == "diverged" and result["failure"] is None
    divergence = result["metadata"]["divergence"]
    assert divergence["policy"] == "warn" and divergence["count"] == 1
    assert divergence["first"]["tool"] == "Bash" and divergence["first"]["batch"] == 1
    rows = json.loads((tmp_path / "out" / "r" / "observations.json").read_text())["observations"]
    changed = next(row for row in rows if not row["exact"])
    assert changed["id"] == divergence["first"]["call_id"] and "-alpha" in changed["diff"]["lines"]


def test_ignore_records_without_a_word(tmp_path: Path) -> None:
    done, result = _replay(tmp_path, "--replay-only", "--on-divergence", "ignore", alter=True)
    assert done.returncode == 0 and "divergence" not in done.stderr
    assert result["metadata"]["divergence"]["count"] == 1 and result["observations_match"] == "diverged"


def test_stop_ends_before_the_continuation_and_sends_nothing(tmp_path: Path) -> None:
    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed (forkpoint agents install claude-code@2.1.332)")
    done, result = _replay(tmp_path, "--upstream", "stub", "--on-divergence", "stop", alter=True)
    assert done.returncode == 32, done.stderr
    assert result["phase"] == "replayed" and result["agent_status"] == "not_started"
    assert result["failure"]["category"] == "divergence" and result["failure"]["retryable"] is False
    assert "first: call toolu_3ZxZOvs3YkXTgCL1OreZlKkn, Bash in batch 1" in result["failure"]["message"]
    assert "model_bridge" not in result["metadata"]  # the agent never started: no model request at all
    assert not (tmp_path / "state" / "r" / "bridge-log.jsonl").exists()
    assert not (tmp_path / "out" / "r" / "native" / "continued").exists()
    assert (tmp_path / "out" / "r" / "native" / "prefix").is_dir()  # the replayed prefix is still there


def test_an_exact_replay_says_nothing(tmp_path: Path) -> None:
    done, result = _replay(tmp_path, "--replay-only", "--on-divergence", "stop", alter=False)
    assert done.returncode == 0 and "divergence" not in done.stderr
    assert result["observations_match"] == "exact" and result["metadata"]["divergence"]["count"] == 0


def test_pure_summary_skips_stale_calls() -> None:
    rows = [{"id": "a", "name": "Bash", "batch": 1, "exact": True},
            {"id": "b", "name": "Agent", "batch": 1, "exact": False, "stale_reused": True},
            {"id": "c", "name": "Read", "batch": 2, "exact": False, "similarity": 0.5, "historical_is_error": False,
             "fresh_is_error": True, "diff": {"lines": ["--- historical", "+++ fresh", "@@ -1 +1 @@", "-x", "+y"]}}]
    assert summary(rows, "warn") == {"policy": "warn", "count": 1, "first": {
        "call_id": "c", "batch": 2, "tool": "Read", "similarity": 0.5}, "calls": [
        {"call_id": "c", "batch": 2, "tool": "Read", "similarity": 0.5}]}
    assert warning_lines(rows) == ["divergence: call c (Read, batch 2) differs from the recording "
                                   "(error flag differs): -x | +y"]
    assert observations_match(rows) == "diverged" and observations_match(rows[:2]) == "exact"
    assert observations_match(None) is None
