"""Rewards and groups end to end with a Chat-protocol agent (real Pi 0.83.0, ScriptedModel): K=4 branches from one
boundary make different edits to a tiny repo with a test, a JSON verifier around `python3 -m pytest -q` scores each
branch's own final workspace 1 or 0, branches.json holds the group with its advantages. Claude Code's run of the
same (with the DPO export and the report) is docs/rl.md's worked example, tests/docs/test_rl_doc.py."""

from __future__ import annotations

import json
from collections.abc import Sequence
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


def test_pi_a_chat_agent_scores_its_branches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
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

    # `forkpoint continue` scores its new branch too, and the group grows to five
    from forkpoint.branches.resume import ContinueOptions, continue_run_dir

    with restored_workspace(fixture) as workspace:
        more = continue_run_dir(Path(result.output_dir or ""), ContinueOptions(
            branches=1, upstream="stub", workspace=workspace,
            score={"score": verifier, "score_format": "json"}), lambda _line: None)
    assert more["branches"][-1]["score"]["reward"] == 0.0 and more["group"]["n"] == 5
    assert more["group"]["mean"] == pytest.approx(0.4)
