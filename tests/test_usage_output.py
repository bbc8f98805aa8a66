"""Where a run's model usage is shown: the summary line, the branch table, a branched run's summed model_usage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forkpoint.branches.branching import aggregate
from forkpoint.cli.commands import _render_branches, _render_result
from forkpoint.core.results import AgentInfo, ReplayResult

USAGE = {"calls": 2, "calls_with_usage": 2, "input_tokens": 1200, "output_tokens": 90, "cached_tokens": 800,
         "reasoning_tokens": 0, "upstream_ms_total": 40.0, "upstream_ms_p50": 20.0, "ttfb_ms_p50": 5.0,
         "ttfb_ms_max": 6.0}


def _row(branch: int, usage: dict[str, Any] | None) -> dict[str, Any]:
    return {"branch": branch, "status": "finished" if usage else "failed", "agent_status": "completed",
            "continued_steps": 1, "same_as_original": True, "files_changed": {"added": ["a"]},
            "first_action": {"tools": [{"name": "Bash"}]}, "model_usage": usage}


def test_the_summary_line_names_calls_and_tokens(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = ReplayResult(phase="continued", quality="verified", agent_status="completed", run_id="r1",
                          agent=AgentInfo(name="claude-code", version="2.1.332", profile=None), after_step=2,
                          replayed_tool_calls=3, state_dir=str(tmp_path), output_dir=str(tmp_path),
                          metadata={"model_usage": USAGE})
    _render_result(result)
    assert ("agent completed, 2 model calls, 1,200 in (800 cached) / 90 out tokens)" in capsys.readouterr().out)
    result.metadata = {"model_usage": {**USAGE, "calls": 1, "calls_with_usage": 0}}  # an upstream reporting none
    _render_result(result)
    assert capsys.readouterr().out.rstrip().endswith("agent completed, 1 model call)")
    result.metadata = {}  # prepare-only / replay-only: no bridge ran
    _render_result(result)
    assert capsys.readouterr().out.rstrip().endswith("agent completed)")


def test_the_branch_table_has_a_tokens_column(capsys: pytest.CaptureFixture[str]) -> None:
    _render_branches({"branches": [_row(1, USAGE), _row(2, None)]})
    header, first, second = capsys.readouterr().out.splitlines()
    column = header.index("tokens")
    assert first[column:].startswith("1,200 in (800 cached) / 90 out") and first.rstrip().endswith("Bash")
    assert second[column:].startswith("-")


def test_a_branched_runs_model_usage_sums_its_branches() -> None:
    continuation = aggregate({"branches": [_row(1, USAGE), _row(2, None), _row(3, {**USAGE, "ttfb_ms_max": 9.0})]})
    assert continuation.metadata["model_usage"] == {
        "calls": 4, "calls_with_usage": 4, "input_tokens": 2400, "output_tokens": 180, "cached_tokens": 1600,
        "reasoning_tokens": 0, "upstream_ms_total": 80.0, "ttfb_ms_max": 9.0}
    assert aggregate({"branches": [_row(1, None)]}).metadata["model_usage"] is None


def test_the_report_shows_tokens_per_run_and_per_branch() -> None:
    from forkpoint.report.render import _branches, _tokens

    assert _tokens(USAGE) == ("2 model calls, 1,200 in (800 cached) / 90 out tokens "
                              "(upstream p50 20 ms, first byte p50 5 ms)")
    assert _tokens(None) == _tokens({"calls": 0}) == "—"
    page = _branches({"branches": [_row(1, USAGE), _row(2, None)]})
    assert "<tr><th>tokens</th><td><pre>1,200 in (800 cached) / 90 out</pre></td><td><pre>—</pre></td></tr>" in page


def test_the_batch_summary_names_the_batchs_calls_and_tokens(capsys: pytest.CaptureFixture[str]) -> None:
    from forkpoint.cli.batch import _batch_summary

    summary: dict[str, Any] = {
        "batch_dir": "/b", "jobs": 2, "counts": {"done": 2}, "bad_lines": [], "failed": [], "by_category": {},
        "model_usage": {"model_calls": 1204, "input_tokens": 38112004, "output_tokens": 412090,
                        "cached_tokens": 30877210, "reasoning_tokens": 0}}
    _batch_summary(summary, as_json=False)
    assert "1,204 model calls, 38,112,004 in (30,877,210 cached) / 412,090 out tokens" in capsys.readouterr().out
    summary["model_usage"] = {**summary["model_usage"], "model_calls": 0}  # a prepare-only batch: no line
    _batch_summary(summary, as_json=False)
    assert "model calls" not in capsys.readouterr().out
