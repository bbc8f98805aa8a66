"""The report page (pure render + collect): every run's facts, the diverging call's diff, and hostile text escaped."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from forkpoint.report import write_report


def test_a_batch_page_has_an_index_and_a_section_per_run(report_runs: Path, tmp_path: Path) -> None:
    info = write_report([report_runs, tmp_path / "missing"], tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert info.runs == 4 and info.size_bytes == len(page.encode())
    assert [p for p, _ in info.skipped] == [str(tmp_path / "missing")]
    assert page.count('<section class="run"') == 4
    assert re.findall(r'<a href="#(run-\d+)">', page) == ["run-1", "run-2", "run-3", "run-4"]
    for run_id in ("codex-prepared", "pi-prepared", "opencode-prepared", "diverging"):
        assert f">{run_id}</a>" in page
    assert "not shown" in page and "not a directory" in page


def test_the_diverging_call_is_marked_with_its_diff(report_runs: Path, tmp_path: Path) -> None:
    write_report([report_runs / "diverging"], tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert "observations diverged" in page
    assert page.count("<details class=\"call diverged\">") == 1  # the data.txt call; page.html is exact
    assert '<span class="del">-beta</span>' in page and '<span class="add">+BETA changed</span>' in page
    assert "boundary — after batch 1" in page


def test_hostile_tool_output_is_text_only(report_runs: Path, tmp_path: Path, xss: str) -> None:
    write_report([report_runs / "diverging"], tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert xss not in page
    assert "&lt;script&gt;window.__forkpoint_xss = 1&lt;/script&gt;&lt;/textarea&gt;" in page
    assert 'href="javascript:' not in page and "onerror=" not in page.replace("onerror=&quot;", "")
    assert page.count("<script>") == 1  # only the page's own filter script
    assert "Content-Security-Policy" in page


def test_no_run_at_all_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no forkpoint run"):
        write_report([tmp_path], tmp_path / "r.html")
    assert not list(tmp_path.iterdir())


def test_an_unverified_recorded_version_is_shown(tmp_path: Path) -> None:
    """Issue 28: the report says the recorded version, its status, whose tool semantics re-ran it, and why the
    run is degraded."""
    from forkpoint.export import export
    from forkpoint.export.rows import ExportOptions
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request
    from forkpoint.testing.claude_sessions import simple_session

    old = simple_session(2, version="2.0.27").write(tmp_path / "old.jsonl")
    result = execute(build_request({"agent": "claude-code", "trajectory": str(old), "after_step": 1,
                                    "prepare_only": True, "state_dir": str(tmp_path / "state"),
                                    "output_dir": str(tmp_path / "out"), "run_id": "old"}, source="test"))
    assert result.failure is None, result.failure
    write_report([tmp_path / "out"], tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text()
    assert "2.0.27: unverified" in page and "degraded (unverified_version)" in page
    # whose tool semantics re-ran it: the measured 2.0.x profile (the continuing version is 2.1.220)
    assert "unverified_version" in page and ">claude-code 2.0.x (measured on 2.0.27)<" in page
    export([tmp_path / "out"], "messages-jsonl", tmp_path / "rows.jsonl", ExportOptions())
    import json

    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert rows and all((row["recorded_version"], row["recorded_version_status"]) == ("2.0.27", "unverified")
                        for row in rows)


def test_a_call_normalised_for_timing_says_so() -> None:
    from forkpoint.report.render import _diff

    row = {"normalised": True, "normalised_reason": "timing",
           "diff": {"lines": ["@@ -1 +1 @@", "-a", "+ab"], "truncated": False}}
    assert "(timing)" in _diff(row)
    row["normalised_reason"] = "volatile"
    assert "(timing)" not in _diff(row) and "normalised (volatile) fields" in _diff(row)


def test_a_branched_run_shows_each_branch_bridge_reward_and_live_turns_side_by_side() -> None:
    """A branched run has no run-level bridge: the page says each branch's gate validated (it said "not started"),
    and the branch columns carry each branch's reward, advantage and live turns (escaped)."""
    from forkpoint.report.render import _branches, _bridge

    rows = [{"branch": i, "model_bridge": {"validated": 2, "refused": 0},
             "score": {"reward": float(i % 2), "exit": i % 2, "duration_s": 0.1, "failure": None},
             "group": {"id": "g", "n": 2, "mean": 0.5, "std": 0.5, "advantage": i % 2 - 0.5,
                       "advantage_grpo": (i % 2 - 0.5) / 0.5}} for i in (1, 2)]
    document = {"branches": rows, "group": {"id": "g", "n": 2, "mean": 0.5, "std": 0.5,
                                            "pass_at_k": {"1": 0.5, "2": 1.0}, "original_reward": 1.0,
                                            "equal_to_original": 1}}
    bridge = _bridge(None, document)
    assert "not started" not in bridge and "validated the first request of 2 of 2 branches" in bridge
    live: dict[str, list[dict[str, Any]]] = {"1": [{"role": "assistant", "content": "<b>fix</b>", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "Edit", "arguments": "{\"x\": 1}"}}]}],
            "2": [{"role": "assistant", "content": "give up"}]}
    page = _branches(document, live)
    assert "<tr><th>reward</th><td><pre>1.0 (exit 1, 0.1 s)</pre></td><td><pre>0.0 (exit 0, 0.1 s)</pre>" in page
    assert "+0.5 (GRPO +1)" in page and "-0.5 (GRPO -1)" in page
    assert "assistant: &lt;b&gt;fix&lt;/b&gt; → Edit" in page and "assistant: give up" in page
    assert "pass@1 0.50, pass@2 1.00, original reward 1.0, equal in 1" in page


def test_a_branched_run_some_of_whose_branches_failed_says_how_many_and_why() -> None:
    """A partial branched run said nothing above its table (each column's failure cell alone): the figures now
    start with the failed count and categories; all failed says all."""
    from forkpoint.report.render import _branches

    finished = {"branch": 1, "status": "finished", "failure": None}
    failed = {"branch": 2, "status": "failed", "failure": {"category": "model_timeout", "message": "m"}}
    assert "1 of 2 branches failed (model_timeout x1); " in _branches({"branches": [finished, failed]})
    assert "all 1 branches failed (model_timeout x1)" in _branches({"branches": [failed]})
    assert "branches failed" not in _branches({"branches": [finished]})
