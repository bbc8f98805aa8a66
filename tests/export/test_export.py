"""`forkpoint export` end to end: real runs of every adapter (from committed recordings) out as parquet, messages
JSONL, ATIF and native copies; loaded as Hugging Face loads them, validated against the OpenAI SDK's chat message
types and the ATIF models; secrets planted in replayed tool output redacted and counted; bad input reported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.export import export
from forkpoint.export.rows import ExportOptions
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use
from forkpoint.testing.recordings import replay_recording

FIXTURES = Path(__file__).parents[1] / "fixtures"
#: (agent, fixture dir, trajectory file, boundary): one recording per adapter
RECORDINGS = [
    ("claude-code", "claude_code/2.1.332/parallel", "session.jsonl", 1),
    ("codex", "codex/0.171.0/parallel", "rollout.jsonl", 1),
    ("opencode", "opencode/1.18.33/parallel", "export.json", 1),
    ("pi", "pi/0.83.0/parallel", "session.jsonl", 1),
    ("mini-swe-agent", "mini_swe_agent/2.4.6/parallel", "trajectory.traj.json", 1),
    ("swe-agent", "swe_agent/1.1.0/thought_action", "toy__thought_action-1.traj", 2),
    ("openhands", "openhands/0.62.0/parallel", "trajectory.json", 1),
    ("openhands-sdk", "openhands-sdk/1.58.2/parallel", "conversation/base_state.json", 1),
]
CANARIES = {
    "github_token": "ghp_C4n4ryC4n4ryC4n4ryC4n4ryC4n4ryC4n4ry",
    "aws_access_key_id": "AKIAC4N4RYC4N4RYC4N4",
    "openai_key": "sk-proj-C4n4ryC4n4ryC4n4ryC4n4ry",
    "secret_assignment": "c4n4ry-db-password",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An output root with a prepare-only run of every adapter and a replay-only run whose tool printed secrets."""
    root = tmp_path_factory.mktemp("runs")
    for agent, fixture, trajectory, after in RECORDINGS:
        result = replay_recording(FIXTURES / fixture, root, agent=agent, trajectory=trajectory, after=after,
                                  run_id=f"{agent}-prepared", prepare_only=True)
        assert result.exit_code == 0, result.failure
    workspace = root / "ws"
    workspace.mkdir()
    (workspace / "secrets.env").write_text(
        f"GITHUB={CANARIES['github_token']}\nAWS={CANARIES['aws_access_key_id']}\n"
        f"OPENAI={CANARIES['openai_key']}\nDB_PASSWORD={CANARIES['secret_assignment']}\n")
    builder = ClaudeSessionBuilder(cwd=str(workspace))
    builder.user_prompt("Show the secrets file.")
    builder.assistant([text("Reading it."), tool_use("toolu_0001", "Bash", {"command": "cat secrets.env"})])
    builder.results({"toolu_0001": "(recorded output)"})
    builder.assistant([text("Done.")])
    session = builder.write(root / "secrets.jsonl")
    result = execute(build_request({
        "agent": "claude-code", "trajectory": str(session), "after_step": 1, "workspace": str(workspace),
        "state_dir": str(root / "state"), "output_dir": str(root / "out"), "run_id": "secrets", "replay_only": True,
    }, source="test"))
    assert result.exit_code == 0, result.failure
    return root / "out"


def _validate_chat(messages: list[dict[str, Any]]) -> None:
    """The OpenAI SDK's own request types accept every message; tool results answer earlier calls."""
    from openai.types.chat import ChatCompletionMessageParam
    from pydantic import TypeAdapter

    ours = ("segment", "trainable", "reasoning_content")
    chat_only = [{k: v for k, v in m.items() if k not in ours and v is not None} for m in messages]
    TypeAdapter(list[ChatCompletionMessageParam]).validate_python(chat_only, strict=True)
    called: set[str] = set()
    answered: set[str] = set()
    for message in chat_only:
        for call in message.get("tool_calls") or []:
            assert call["id"] not in called, "tool call ids are unique"
            called.add(call["id"])
            assert isinstance(json.loads(call["function"]["arguments"]), dict)
        if message["role"] == "tool":
            assert message["tool_call_id"] in called, "a tool message answers an earlier call"
            answered.add(message["tool_call_id"])
    last: dict[str, Any] = next((m for m in reversed(chat_only) if m["role"] == "assistant"), {})
    last_calls = {c["id"] for c in (last.get("tool_calls") or [])}
    assert called - answered <= last_calls, "only the final turn may have unanswered calls"


def test_parquet_loads_with_datasets_and_every_row_is_valid_chat(runs: Path, tmp_path: Path) -> None:
    import datasets

    out = tmp_path / "rows.parquet"
    report = export([runs], "parquet", out, ExportOptions())
    assert report.rows == len(RECORDINGS) + 1 and not report.skipped
    dataset = datasets.load_dataset("parquet", data_files=str(out), split="train", cache_dir=str(tmp_path / "hf"))
    assert sorted(dataset["agent"]) == sorted([agent for agent, *_ in RECORDINGS] + ["claude-code"])
    for row in dataset:
        messages = [{k: v for k, v in m.items() if v is not None} for m in row["messages"]]
        _validate_chat(messages)
        assert row["prefix_message_count"] == len(messages)  # prepare-only / replay-only: no live part
        assert {m["segment"] for m in messages} <= {"task", "prefix"}
        assert not any(m["trainable"] for m in messages)  # default: live turns only
        assert row["source_sha256"] and row["after_step"] >= 1
        # a persisted OpenHands SDK conversation names no SDK version: always read as unverified (degraded)
        assert row["quality"] == ("degraded" if row["agent"] == "openhands-sdk" else "verified")
        assert row["bridge_verdict"] == "not_started"
    openhands = next(row for row in dataset if row["agent"] == "openhands")
    assert openhands["tools_source"] == "native" and json.loads(openhands["tools"])[0]["type"] == "function"
    claude = next(row for row in dataset if row["run_id"] == "claude-code-prepared")
    assert claude["tools"] is None and claude["tools_source"] == "not_recorded"


def test_jsonl_equals_parquet_and_train_on_selects_the_prefix(runs: Path, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    report = export([runs], "messages-jsonl", tmp_path / "rows.jsonl", ExportOptions(train_on="prefix"))
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == report.rows
    for row in rows:
        for message in row["messages"]:
            assert message["trainable"] == (message["role"] == "assistant" and message["segment"] == "prefix")
    export([runs], "parquet", tmp_path / "rows.parquet", ExportOptions(train_on="prefix"))
    table = pq.read_table(tmp_path / "rows.parquet").to_pylist()
    assert [r["run_id"] for r in table] == [r["run_id"] for r in rows]
    assert [[m["content"] for m in r["messages"]] for r in table] == [[m["content"] for m in r["messages"]]
                                                                        for r in rows]


def test_secrets_in_replayed_output_are_redacted_and_counted(runs: Path, tmp_path: Path) -> None:
    report = export([runs / "secrets"], "messages-jsonl", tmp_path / "r.jsonl", ExportOptions())
    exported = (tmp_path / "r.jsonl").read_text()
    for secret in CANARIES.values():
        assert secret not in exported
    counts = json.loads((tmp_path / "r.jsonl.report.json").read_text())["redaction"]
    for kind in CANARIES:
        assert counts["totals"][kind] >= 1 and counts["per_row"]["secrets"][kind] >= 1
    assert report.rows == 1
    for secret in CANARIES.values():
        assert secret not in (tmp_path / "r.jsonl.report.json").read_text()
    export([runs / "secrets"], "messages-jsonl", tmp_path / "raw.jsonl", ExportOptions(redact=False))
    raw = (tmp_path / "raw.jsonl").read_text()
    assert all(secret in raw for secret in CANARIES.values())
    assert json.loads(raw)["redacted"] is False


def test_native_copies_are_redacted_and_still_parse(runs: Path, tmp_path: Path) -> None:
    export([runs / "secrets"], "native", tmp_path / "native", ExportOptions())
    prefix = next((tmp_path / "native" / "secrets" / "prefix").iterdir())
    text_out = prefix.read_text()
    assert all(secret not in text_out for secret in CANARIES.values())
    assert all(json.loads(line) for line in text_out.splitlines())
    assert json.loads((tmp_path / "native" / "secrets" / "provenance.json").read_text())["agent"] == "claude-code"


def test_atif_documents_validate(runs: Path, tmp_path: Path) -> None:
    from atif import Trajectory

    export([runs], "atif", tmp_path / "atif", ExportOptions())
    files = sorted((tmp_path / "atif").iterdir())
    assert len(files) == 2 * (len(RECORDINGS) + 1)
    for path in files:
        document = Trajectory.model_validate_json(path.read_text())
        assert document.schema_version == "ATIF-v1.8"
        if not path.name.endswith(".prefix.json"):
            assert all(step.is_copied_context for step in document.steps)  # nothing live in these runs
        calls = [c for step in document.steps for c in step.tool_calls or []]
        results = [r for step in document.steps if step.observation for r in step.observation.results]
        assert {r.source_call_id for r in results} <= {c.tool_call_id for c in calls}


def test_bad_input_is_reported_and_nothing_half_written(runs: Path, tmp_path: Path) -> None:
    unfinished = tmp_path / "unfinished"
    (unfinished / "native").mkdir(parents=True)
    (unfinished / "replay-events.jsonl").write_text("{}\n")
    other = tmp_path / "other" / "run"
    other.mkdir(parents=True)
    (other / "result.json").write_text(json.dumps({"schema_version": "forkpoint.result/v0"}))
    out = tmp_path / "rows.parquet"
    report = export([runs / "secrets", unfinished, other.parent, tmp_path / "missing"], "parquet", out,
                    ExportOptions())
    assert report.rows == 1
    reasons = {Path(s["path"]).name: s["reason"] for s in report.skipped}
    assert set(reasons) == {"unfinished", "run", "missing"}
    assert "forkpoint.result/v0" in reasons["run"] and "not a directory" in reasons["missing"]
    assert "no forkpoint run" in reasons["unfinished"]
    with pytest.raises(FileExistsError):
        export([runs], "parquet", out, ExportOptions())

    def explode(_report: object) -> None:
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        export([runs], "parquet", tmp_path / "never.parquet", ExportOptions(), progress=explode)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith((".never", "never"))]


@pytest.mark.parametrize("edit", [{"agent": "claude-code"}, {"artifacts": ["native/prefix/x"]},
                                  {"metadata": ["a", "list"]}], ids=["agent-a-string", "artifact-a-string",
                                                                     "metadata-a-list"])
def test_a_result_of_the_wrong_shape_is_skipped_naming_the_file(tmp_path: Path, edit: dict[str, Any]) -> None:
    """result.json is read typed: an edited one is a skipped run saying why, never an AttributeError that ends
    the whole export (and the report)."""
    from forkpoint.report import write_report

    run = tmp_path / "runs" / "edited"
    run.mkdir(parents=True)
    (run / "result.json").write_text(json.dumps({"schema_version": "forkpoint.result/v1", "phase": "prepared",
                                                 "agent_status": "not_started", **edit}))
    report = export([tmp_path / "runs"], "parquet", tmp_path / "rows.parquet", ExportOptions())
    assert report.rows == 0 and len(report.skipped) == 1
    assert "result.json is not what forkpoint wrote" in report.skipped[0]["reason"]
    with pytest.raises(FileNotFoundError, match=r"result\.json is not what forkpoint wrote"):
        write_report([tmp_path / "runs"], tmp_path / "report.html")


def test_cli_exports_and_refuses_an_existing_output(runs: Path, tmp_path: Path) -> None:
    command = [sys.executable, "-m", "forkpoint.cli", "export", str(runs), "--format", "messages-jsonl",
               "-o", str(tmp_path / "rows.jsonl"), "--json"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["rows"] == len(RECORDINGS) + 1
    again = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert again.returncode == 2 and "never overwrites" in again.stdout


@pytest.mark.e2e
def test_continued_run_has_boundary_prompt_and_trainable_live_turns(tmp_path: Path) -> None:
    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed (forkpoint agents install claude-code@2.1.332)")
    result = replay_recording(FIXTURES / "claude_code/2.1.332/parallel", tmp_path, agent="claude-code",
                              trajectory="session.jsonl", after=1, upstream="stub",
                              boundary_user_prompt="Check b.txt again.")
    assert result.exit_code == 0, result.failure
    report = export([tmp_path / "out"], "messages-jsonl", tmp_path / "rows.jsonl", ExportOptions())
    assert report.rows == 1
    row = json.loads((tmp_path / "rows.jsonl").read_text())
    segments = [m["segment"] for m in row["messages"]]
    count = row["prefix_message_count"]
    assert segments[:count] == ["task", "prefix", "prefix", "prefix"]
    assert segments[count:] == ["boundary_prompt", "live"]
    assert row["messages"][count]["content"] == "Check b.txt again."
    assert [m["trainable"] for m in row["messages"]] == [False] * (count + 1) + [True]
    assert row["phase"] == "continued" and row["bridge_verdict"] == "validated"
    assert row["continuing_version"] == "2.1.332" and row["model"] == "claude-opus-5-5"
    _validate_chat(row["messages"])
    export([tmp_path / "out"], "atif", tmp_path / "atif", ExportOptions())
    full = json.loads((tmp_path / "atif" / "run-1.json").read_text())
    prefix = json.loads((tmp_path / "atif" / "run-1.prefix.json").read_text())
    assert prefix["continued_trajectory_ref"] == "run-1.json"
    assert [s.get("is_copied_context", False) for s in full["steps"]] == [True, True, False, False]


def test_scored_runs_export_reward_group_advantage_and_the_forkpoint_version(tmp_path: Path) -> None:
    """Three replay-only runs of one trajectory and boundary, scored 1 / 0 / 1 (one giving the original's reward):
    one group across the runs, each row with its reward and advantages; forkpoint_version is filled (it was empty)."""
    from forkpoint import __version__

    builder = ClaudeSessionBuilder(cwd=str(tmp_path / "ws"))
    builder.user_prompt("Write it.")
    builder.assistant([tool_use("t1", "Bash", {"command": "echo hi > out.txt"})])
    builder.results({"t1": ""})
    builder.assistant([text("Done.")])
    session = builder.write(tmp_path / "s.jsonl")
    for index, check in enumerate(("test -f out.txt", "test -f missing.txt", "echo 1")):
        workspace = tmp_path / "ws"
        if workspace.exists():
            import shutil

            shutil.rmtree(workspace)
        workspace.mkdir()
        extra: dict[str, Any] = {"original_reward": 1.0} if index == 0 else {}
        result = execute(build_request({
            "agent": "claude-code", "trajectory": str(session), "after_step": 1, "workspace": str(workspace),
            "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"), "run_id": f"r{index}",
            "replay_only": True, "score": check, **extra}, source="test"))
        assert result.exit_code == 0, result.failure
    export([tmp_path / "out"], "messages-jsonl", tmp_path / "rows.jsonl", ExportOptions())
    rows = {row["run_id"]: row for row in map(json.loads, (tmp_path / "rows.jsonl").read_text().splitlines())}
    assert {run: row["reward"] for run, row in rows.items()} == {"r0": 1.0, "r1": 0.0, "r2": 1.0}
    assert len({row["group_id"] for row in rows.values()}) == 1
    assert rows["r1"]["advantage"] == pytest.approx(-2 / 3)
    assert rows["r1"]["advantage_grpo"] == pytest.approx((-2 / 3) / (2 / 9) ** 0.5)
    assert all(row["original_reward"] == 1.0 for row in rows.values())  # the group's, given by one run
    assert all(row["forkpoint_version"] == __version__ for row in rows.values())
    export([tmp_path / "out"], "parquet", tmp_path / "rows.parquet", ExportOptions())  # the schema takes them
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "rows.parquet", columns=["reward", "group_id", "advantage"])
    assert sorted(table.column("reward").to_pylist()) == [0.0, 1.0, 1.0]
    report = export([tmp_path / "out"], "dpo", tmp_path / "pairs.jsonl", ExportOptions())
    assert report.rows == 0 and report.dpo_skipped == {"ties": 0, "single": 0, "empty": 1}  # no live turns
