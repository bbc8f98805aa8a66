"""End to end ``--capture-tokens``: the REAL mini-swe-agent 2.4.6 (Chat Completions through litellm) continues a
recording against ScriptedModel answering like vLLM, and ``forkpoint export --format tokens`` (and ATIF's token
fields) hold, id for id, what the model sent; the REAL claude-code (Anthropic Messages) runs with the capture on and
the run says once that its upstream returns no token ids, without failing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.e2e.test_mini_swe_agent_continue import FIXTURES as MINI_FIXTURES
from tests.e2e.test_mini_swe_agent_continue import _require_runtime as require_mini
from tests.e2e.test_mini_swe_agent_continue import script_from

from forkpoint.branches.resume import ContinueOptions, continue_run_dir
from forkpoint.export import export
from forkpoint.export.rows import ExportOptions
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import replay_recording, restored_workspace

pytestmark = pytest.mark.e2e

CLAUDE = Path(__file__).parents[1] / "fixtures" / "claude_code" / "2.1.332" / "single_bash"


def test_a_chat_agents_token_export_is_what_the_model_sent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_mini("2.4.6")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    fixture = MINI_FIXTURES / "2.4.6" / "basic"
    model = script_from(fixture, 1)
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent="mini-swe-agent", trajectory="trajectory.traj.json",
                                  after=1, upstream="openai-chat", upstream_url=f"{url}/v1", capture_tokens=True)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    assert main and all(entry["body"]["return_token_ids"] is True for entry in main)
    capture = result.metadata["token_capture"]
    assert (capture["status"], capture["records"], capture["file"]) == ("captured", len(main), "tokens.jsonl")

    out = tmp_path / "tokens-export.jsonl"
    report = export([Path(result.output_dir or "")], "tokens", out, ExportOptions())
    rows = [json.loads(line) for line in out.read_text("utf-8").splitlines()]
    assert report.rows == len(rows) == len(main) and report.token_requests == {"ok": len(main)}
    sent = [entry["sent_tokens"] for entry in main]
    assert [row["prompt_token_ids"] for row in rows] == [s["prompt_token_ids"] for s in sent]
    assert [row["completion_token_ids"] for row in rows] == [s["completion_token_ids"] for s in sent]
    assert [row["logprobs"] for row in rows] == [s["logprobs"] for s in sent]
    assert all(row["loss_mask"] == [1] * len(row["completion_token_ids"]) for row in rows)
    assert all(row["run_id"] == result.run_id and row["branch"] is None and row["reward"] is None for row in rows)

    atif = tmp_path / "atif"
    export([Path(result.output_dir or "")], "atif", atif, ExportOptions())
    document = json.loads((atif / f"{result.run_id}.json").read_text("utf-8"))
    filled = [step["metrics"] for step in document["steps"] if step.get("metrics")]
    assert document["extra"]["token_ids"].startswith("filled"), document["extra"]["token_ids"]
    assert [m["completion_token_ids"] for m in filled] == [s["completion_token_ids"] for s in sent]


def test_claude_code_says_once_that_its_upstream_returns_no_tokens(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from forkpoint import runtimes

    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted-upstream-key")
    model = ScriptedModel([])  # every step request: "Done."
    with model.serve() as url:
        result = replay_recording(CLAUDE, tmp_path, agent="claude-code", trajectory="session.jsonl", after=1,
                                  upstream="anthropic", upstream_url=url, capture_tokens=True, keep_snapshot=True)
        with restored_workspace(CLAUDE, remove=False):  # `forkpoint continue --branches 1 --capture-tokens`
            document = continue_run_dir(Path(result.output_dir or ""), ContinueOptions(
                branches=1, upstream="anthropic", upstream_url=url, capture_tokens=True), lambda _: None)
    assert result.failure is None, result.failure
    assert [row["status"] for row in document["branches"]] == ["finished"], document["branches"]
    branch = Path(result.output_dir or "") / "branches" / "1" / "tokens.jsonl"
    assert {json.loads(line)["status"] for line in branch.read_text().splitlines()} == {"unavailable"}
    capture = result.metadata["token_capture"]
    assert capture["status"] == "unavailable" and capture["requests"] >= 1
    assert capture["reason"].startswith("the anthropic upstream returns no token ids")
    lines = [json.loads(line) for line in (Path(result.output_dir or "") / "tokens.jsonl").read_text().splitlines()]
    assert {line["status"] for line in lines} == {"unavailable"} and len(lines) == capture["requests"]
    assert all(line["prompt_token_ids"] is None and line["completion_token_ids"] is None for line in lines)
    assert all("return_token_ids" not in json.dumps(entry.get("body")) for entry in model.requests)
