"""Rewards and groups end to end (real Claude Code 2.1.332, ScriptedModel): K=4 branches from one boundary make
different edits to a tiny repo with a test, the verifier `python3 -m pytest -q` scores each branch's own final
workspace 1 or 0, branches.json holds the group with its advantages, and the DPO export pairs the best branch
with the worst and loads with `datasets`."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import restored_workspace
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = pytest.mark.e2e
FIXTURES = Path(__file__).parents[1] / "fixtures"
#: each branch's temperature (--branch-temperature) is what the scripted upstream tells them apart by
BRANCHES = {0.11: "alpha", 0.22: "bravo", 0.33: "charlie", 0.44: None}
TEST_FILE = 'def test_the_branch_fixed_it():\n    assert open("branch.txt").read().strip() in ("alpha", "charlie")\n'


@pytest.fixture()
def keys(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted-upstream-key")
    yield


def test_claude_four_scored_branches_make_a_group_and_a_dpo_pair(tmp_path: Path, keys: None) -> None:
    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed (forkpoint agents install claude-code@2.1.332)")
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request

    fixture = FIXTURES / "claude_code" / "2.1.332" / "file_tools"
    base = json.loads((fixture / "script.json").read_text())["turns"]
    keyed: dict[str, Sequence[Any]] = {}
    for temperature, name in BRANCHES.items():
        action = [text("nothing to change")] if name is None else [
            tool_use("Bash", {"command": f"echo {name} > branch.txt"})]
        keyed[f'"temperature": {temperature}'] = [*base[:2], action, [text(f"{name} done")]]
    model = ScriptedModel(base, keyed=keyed)
    with restored_workspace(fixture) as workspace, model.serve() as url:
        (workspace / "test_branch.py").write_text(TEST_FILE)
        result = execute(build_request({
            "agent": "claude-code", "trajectory": str(fixture / "session.jsonl"), "after_step": 2,
            "workspace": str(workspace), "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
            "run_id": "rl", "upstream": "anthropic", "upstream_url": url, "branches": 4,
            "branch_temperatures": list(BRANCHES), "score": "python3 -m pytest -q", "original_reward": 1.0},
            source="test"))
    assert result.failure is None, result.failure
    out = Path(result.output_dir or "")
    document = json.loads((out / "branches.json").read_text())
    rows = {row["branch"]: row for row in document["branches"]}
    assert {i: rows[i]["score"]["reward"] for i in rows} == {1: 1.0, 2: 0.0, 3: 1.0, 4: 0.0}, [
        rows[i]["score"] for i in rows]
    assert all(rows[i]["score"]["failure"] is None and rows[i]["score"]["exit"] == (i % 2 == 0) for i in rows)
    assert rows[1]["files_changed"]["added"] == ["branch.txt"]  # scored after: pytest's own files are not the agent's
    group = document["group"]
    assert (group["n"], group["mean"], group["std"], group["pass_at_k"]["1"], group["pass_at_k"]["3"]) == (
        4, 0.5, 0.5, 0.5, 1.0)
    assert (group["original_reward"], group["equal_to_original"]) == (1.0, 2)
    assert {i: (rows[i]["group"]["advantage"], rows[i]["group"]["advantage_grpo"]) for i in rows} == {
        1: (0.5, 1.0), 2: (-0.5, -1.0), 3: (0.5, 1.0), 4: (-0.5, -1.0)}
    assert len({rows[i]["group"]["id"] for i in rows}) == 1
    assert result.metadata["branches"]["group"] == group

    from forkpoint.export import export
    from forkpoint.export.rows import ExportOptions

    report = export([out], "dpo", tmp_path / "pairs.jsonl", ExportOptions())
    assert report.rows == 1 and report.dpo_skipped == {"ties": 0, "single": 0, "empty": 0}
    pair = json.loads((tmp_path / "pairs.jsonl").read_text())
    assert (pair["chosen_branch"], pair["rejected_branch"], pair["chosen_reward"], pair["rejected_reward"]) == (
        1, 2, 1.0, 0.0)
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
    assert "echo alpha" in html and "1.0 (exit 0" in html


def test_pi_a_chat_agent_scores_its_branches_too(tmp_path: Path, keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same group from a Chat-protocol agent (Pi 0.83.0 through --upstream openai-chat), scored as JSON."""
    if runtimes.find("pi", "0.83.0") is None:
        pytest.skip("pi 0.83.0 is not installed (forkpoint agents install pi@0.83.0)")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request

    fixture = FIXTURES / "pi" / "0.83.0" / "single_bash"
    base = json.loads((fixture / "script.json").read_text())["turns"]
    keyed: dict[str, Sequence[Any]] = {}
    for temperature, name in BRANCHES.items():
        action = [text("nothing to change")] if name is None else [
            tool_use("bash", {"command": f"echo {name} > branch.txt"})]
        keyed[f'"temperature": {temperature}'] = [*base[:1], action, [text(f"{name} done")]]
    model = ScriptedModel(base, keyed=keyed, model="scripted-model")
    verifier = ("python3 -m pytest -q >/dev/null && echo '{\"reward\": 1, \"suite\": \"branch\"}' "
                "|| echo '{\"reward\": 0, \"suite\": \"branch\"}'")
    with restored_workspace(fixture) as workspace, model.serve() as url:
        (workspace / "test_branch.py").write_text(TEST_FILE)
        result = execute(build_request({
            "agent": "pi", "trajectory": str(fixture / "session.jsonl"), "after_step": 1,
            "workspace": str(workspace), "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
            "run_id": "rl-pi", "upstream": "openai-chat", "upstream_url": url + "/v1", "branches": 4,
            "branch_temperatures": list(BRANCHES), "score": verifier, "score_format": "json"}, source="test"))
    assert result.failure is None, result.failure
    document = json.loads((Path(result.output_dir or "") / "branches.json").read_text())
    rows = {row["branch"]: row for row in document["branches"]}
    assert {i: rows[i]["score"]["reward"] for i in rows} == {1: 1.0, 2: 0.0, 3: 1.0, 4: 0.0}, [
        rows[i]["score"] for i in rows]
    assert all(rows[i]["score"]["extra"] == {"suite": "branch"} for i in rows)
    assert [rows[i]["group"]["advantage_grpo"] for i in sorted(rows)] == [1.0, -1.0, 1.0, -1.0]
    assert document["group"]["pass_at_k"]["2"] == pytest.approx(1 - 1 / 6)
