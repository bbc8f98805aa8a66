"""Runs the report tests look at: a small batch of prepare-only runs, and a replay-only run of a hand-made Claude
session whose workspace was altered before the replay (one diverging call) and whose tool output carries XSS
canaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use
from forkpoint.testing.recordings import replay_recording

FIXTURES = Path(__file__).parents[1] / "fixtures"
XSS = ('<script>window.__forkpoint_xss = 1</script></textarea><img src=x onerror="window.__forkpoint_xss = 2">'
       '<a href="javascript:window.__forkpoint_xss = 3">click</a>')


@pytest.fixture()
def xss() -> str:
    return XSS


@pytest.fixture(scope="package")
def report_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report-runs")
    for agent, fixture, trajectory in (("codex", "codex/0.171.0/parallel", "rollout.jsonl"),
                                       ("pi", "pi/0.83.0/parallel", "session.jsonl"),
                                       ("opencode", "opencode/1.18.33/parallel", "export.json")):
        result = replay_recording(FIXTURES / fixture, root, agent=agent, trajectory=trajectory, after=1,
                                  run_id=f"{agent}-prepared", prepare_only=True)
        assert result.exit_code == 0, result.failure
    workspace = root / "ws"
    workspace.mkdir()
    (workspace / "data.txt").write_text("alpha\nBETA changed\ngamma\n")
    (workspace / "page.html").write_text(XSS)
    builder = ClaudeSessionBuilder(cwd=str(workspace))
    builder.user_prompt("Look at the data and the page.")
    builder.assistant([text("Reading."), tool_use("toolu_0001", "Bash", {"command": "cat data.txt"}),
                       tool_use("toolu_0002", "Bash", {"command": "cat page.html"})])
    builder.results({"toolu_0001": "alpha\nbeta\ngamma", "toolu_0002": XSS})
    builder.assistant([text("Done.")])
    result = execute(build_request({
        "agent": "claude-code", "trajectory": str(builder.write(root / "diverging.jsonl")), "after_step": 1,
        "workspace": str(workspace), "state_dir": str(root / "state"), "output_dir": str(root / "out"),
        "run_id": "diverging", "replay_only": True,
    }, source="test"))
    assert result.exit_code == 0, result.failure
    return root / "out"
