"""``forkpoint export --format tokens`` over real run dirs (a replay-only run of a committed recording) with token
records as the bridge writes them: one row per captured request, the loss mask, the reward and group read from the
run's documents when present (result.json ``score``; branches.json ``score``/``group``), and hostile sidecars
(a planted link, junk lines, records without ids) reported, never a crash."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from forkpoint.bridge.token_capture import AnswerTokens, TokenLog
from forkpoint.export import export
from forkpoint.export.rows import ExportOptions
from forkpoint.testing.recordings import replay_recording

FIXTURE = Path(__file__).parents[1] / "fixtures" / "claude_code" / "2.1.332" / "parallel"


@pytest.fixture(scope="module")
def base_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("base")
    result = replay_recording(FIXTURE, root, agent="claude-code", trajectory="session.jsonl", after=1,
                              prepare_only=True)
    assert result.exit_code == 0, result.failure
    return Path(result.output_dir or "")


def run_copy(base: Path, tmp_path: Path) -> Path:
    run = tmp_path / "runs" / base.name
    shutil.copytree(base, run, symlinks=True)
    return run


def write_tokens(path: Path, answers: list[dict[str, Any]], auxiliary: tuple[int, ...] = ()) -> TokenLog:
    path.parent.mkdir(parents=True, exist_ok=True)
    log = TokenLog(path)
    for index, chunk in enumerate(answers):
        answer = AnswerTokens(auxiliary=index in auxiliary, sampling={"temperature": 0.7})
        answer.read(chunk)
        log.finish(answer, None)
    return log


def answer(prompt: list[int], completion: list[int]) -> dict[str, Any]:
    return {"prompt_token_ids": prompt, "choices": [{"index": 0, "token_ids": completion, "finish_reason": "stop",
                                                     "logprobs": {"content": [{"token": "x", "logprob": -0.5}
                                                                              for _ in completion]}}]}


def edit_json(path: Path, change: dict[str, Any]) -> None:
    document = json.loads(path.read_text())
    document.update(change)
    path.write_text(json.dumps(document))


def test_rows_are_requests_with_mask_and_the_runs_reward(base_run: Path, tmp_path: Path) -> None:
    run = run_copy(base_run, tmp_path)
    write_tokens(run / "tokens.jsonl", [answer([5, 6, 7], [8, 9]), answer([1], [2, 3, 4]), {"choices": []}],
                 auxiliary=(1,))
    edit_json(run / "result.json", {"score": {"reward": 0.75, "exit_code": 0}})
    out = tmp_path / "tokens.jsonl"
    report = export([tmp_path / "runs"], "tokens", out, ExportOptions())
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert report.rows == 2 and report.token_requests == {"ok": 2, "unavailable": 1}
    assert json.loads((tmp_path / "tokens.jsonl.report.json").read_text())["token_requests"]["unavailable"] == 1
    first, helper = rows
    assert (first["prompt_token_ids"], first["completion_token_ids"], first["logprobs"]) == ([5, 6, 7], [8, 9],
                                                                                          [-0.5, -0.5])
    assert first["loss_mask"] == [1, 1] and helper["loss_mask"] == [0, 0, 0] and helper["auxiliary"] is True
    assert first["sampling"] == {"temperature": 0.7} and first["finish_reason"] == "stop"
    assert (first["reward"], first["group_id"], first["advantage"], first["advantage_grpo"]) == (0.75, None, None,
                                                                                                 None)
    assert first["run_id"] == run.name and first["branch"] is None and first["request"] == 1


def test_each_branch_gets_its_own_records_reward_and_group(base_run: Path, tmp_path: Path) -> None:
    run = run_copy(base_run, tmp_path)
    branches = [{"branch": 1, "status": "finished", "score": {"reward": 1.0},
                 "group": {"id": "g-1", "advantage": 0.5, "advantage_grpo": 1.0}},
                {"branch": 2, "status": "finished", "score": {"reward": "NaN"}, "group": {"id": "g-1"}}]
    (run / "branches.json").write_text(json.dumps({"branches": branches}))
    write_tokens(run / "branches" / "1" / "tokens.jsonl", [answer([1, 2], [3])])
    write_tokens(run / "branches" / "2" / "tokens.jsonl", [answer([1, 2], [4, 5])])
    out = tmp_path / "tokens.jsonl"
    export([tmp_path / "runs"], "tokens", out, ExportOptions())
    rows = {row["branch"]: row for row in map(json.loads, out.read_text().splitlines())}
    assert rows[1]["completion_token_ids"] == [3] and rows[2]["completion_token_ids"] == [4, 5]
    assert (rows[1]["reward"], rows[1]["group_id"], rows[1]["advantage"], rows[1]["advantage_grpo"]) == (
        1.0, "g-1", 0.5, 1.0)
    assert (rows[2]["reward"], rows[2]["group_id"], rows[2]["advantage"]) == (None, "g-1", None)  # not a number


def test_a_planted_link_and_junk_lines_are_no_rows_and_no_crash(base_run: Path, tmp_path: Path) -> None:
    run = run_copy(base_run, tmp_path)
    secret = tmp_path / "secret.jsonl"
    write_tokens(secret, [answer([1], [2])])
    os.symlink(secret, run / "tokens.jsonl")
    other = run_copy(base_run, tmp_path / "b")
    (other / "tokens.jsonl").write_bytes(b"not json\n[1,2]\n" + (tmp_path / "secret.jsonl").read_bytes())
    out = tmp_path / "tokens.jsonl"
    report = export([tmp_path / "runs", tmp_path / "b" / "runs"], "tokens", out, ExportOptions())
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["run_id"] for row in rows] == [other.name] and report.rows == 1  # the link was not followed
    assert report.token_requests == {"ok": 1, "unreadable": 1}


def test_atif_fills_token_fields_only_when_steps_and_requests_pair(base_run: Path, tmp_path: Path) -> None:
    run = run_copy(base_run, tmp_path)
    write_tokens(run / "tokens.jsonl", [answer([1], [2])])
    export([tmp_path / "runs"], "atif", tmp_path / "atif", ExportOptions())
    document = json.loads((tmp_path / "atif" / f"{run.name}.json").read_text())
    assert document["extra"]["token_ids"].startswith("not filled: 0 live agent steps, 1 captured")
    assert not any(step.get("metrics") for step in document["steps"])
