"""The pipeline contract: refusals before allocation, exclusive outputs, journal, prepare-only outputs."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import orjson
import pytest

from forkpoint.run.engine import execute
from forkpoint.run.journal import Journal
from forkpoint.run.request import ReplayRequest, build_request
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, simple_session, text, tool_use

SECRET_PROMPT = "please look at the failing test again"


@pytest.fixture()
def layout(tmp_path: Path) -> dict[str, Path]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "keep.txt").write_text("untouched\n")
    trajectory = simple_session(3).write(tmp_path / "session.jsonl")
    return {"root": tmp_path, "workspace": workspace, "trajectory": trajectory,
            "state": tmp_path / "state", "output": tmp_path / "out"}


def _request(layout: dict[str, Path], **overrides: object) -> ReplayRequest:
    values: dict[str, object] = {
        "agent": "claude-code",
        "trajectory": str(layout["trajectory"]),
        "after_step": 2,
        "workspace": str(layout["workspace"]),
        "state_dir": str(layout["state"]),
        "output_dir": str(layout["output"]),
        "run_id": "run-1",
        "prepare_only": True,
    }
    values.update(overrides)
    return build_request(values, source="test")


def test_prepare_only_writes_the_contract_outputs(layout: dict[str, Path]) -> None:
    source_before = layout["trajectory"].read_bytes()
    result = execute(_request(layout, boundary_user_prompt=SECRET_PROMPT))
    assert result.failure is None and result.exit_code == 0
    assert (result.phase, result.quality, result.agent_status) == ("prepared", "verified", "not_started")
    assert result.replayed_tool_calls == 0 and result.after_step == 2 and result.prefix_model_turns == 2
    out = layout["output"] / "run-1"
    for name in ("result.json", "manifest.json", "replay-summary.json", "replay-events.jsonl"):
        assert (out / name).is_file(), name
    prefix = out / "native" / "prefix" / "session-1.jsonl"
    lines = prefix.read_bytes().splitlines()
    source_lines = source_before.splitlines()
    assert lines == source_lines[:7]  # task + 2 x (text, tool_use, result): original bytes, nothing else
    assert orjson.loads(lines[-1])["message"]["content"][0]["content"] == "2\n"
    # Nothing ran and nothing changed.
    assert layout["trajectory"].read_bytes() == source_before
    assert sorted(p.name for p in layout["workspace"].iterdir()) == ["keep.txt"]
    document = json.loads((out / "result.json").read_text())
    assert document["schema_version"] == "forkpoint.result/v1"
    assert document["metadata"]["source_sha256"] == result.metadata["source_sha256"]
    assert document["metadata"]["boundary_user_prompt"]["requested"] is True
    manifest = json.loads((out / "manifest.json").read_text())
    assert [b["ordinal"] for b in manifest["batches"]] == [1, 2]
    assert manifest["batches"][1]["tool_calls"][0]["arguments"] == {"command": "echo 2"}
    events = [json.loads(line) for line in (out / "replay-events.jsonl").read_text().splitlines()[1:]]
    assert [e["event"] for e in events] == ["run_started", "plan_validated", "session_prepared", "run_finished"]
    roles = [a.role for a in result.artifacts]
    assert roles == ["playback_plan", "replay_events", "replay_summary", "native_prefix"]
    # The boundary prompt text is never persisted: only its flag, length and hash.
    for path in [*out.rglob("*"), *layout["state"].rglob("*")]:
        if path.is_file():
            assert SECRET_PROMPT.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(
    ("overrides", "category", "exit_code"),
    [
        ({"after_step": 9}, "trajectory_error", 10),
        ({"workspace": "/nonexistent/ws", "prepare_only": None, "replay_only": True}, "workspace_error", 20),
        ({"trajectory": "/nonexistent/t.jsonl"}, "configuration_error", 2),
        ({"agent": "pi"}, "trajectory_error", 10),  # a Claude session is not a Pi recording
        ({"agent": "codex"}, "trajectory_error", 10),
    ],
)
def test_refusals_before_allocation_consume_no_output(
    layout: dict[str, Path], overrides: dict[str, object], category: str, exit_code: int
) -> None:
    result = execute(_request(layout, **overrides))
    assert result.failure is not None
    assert (result.failure.category, result.exit_code) == (category, exit_code)
    assert result.phase is None
    assert result.output_dir == str(layout["output"] / "run-1")
    assert not (layout["output"] / "run-1").exists()


def test_unverified_recording_version_is_refused_when_verified_is_required(layout: dict[str, Path]) -> None:
    simple_session(2, version="2.0.1").write(layout["trajectory"])
    result = execute(_request(layout, require_verified_version=True))
    assert result.failure is not None and result.failure.category == "unsupported_version"
    assert result.exit_code == 11 and "2.0.1" in result.failure.message
    assert not (layout["output"] / "run-1").exists()  # nothing is written for a refused run


def test_unverified_recording_version_prepares_degraded(layout: dict[str, Path]) -> None:
    """Issue 28: a readable recording of a version forkpoint never verified is prepared, and says so."""
    simple_session(2, version="2.0.1").write(layout["trajectory"])
    result = execute(_request(layout))
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.quality_reasons) == ("prepared", "degraded", ["unverified_version"])
    assert (result.recorded_version, result.recorded_version_status) == ("2.0.1", "unverified")
    assert result.agent is not None and result.agent.tool_semantics_version == "2.1.220"
    assert result.agent.profile == "claude-code/2.1.220/native-resume-v1"
    # the tools re-run with the measured 2.0.x profile, and the result names it (not just the continuing version)
    assert result.agent.tool_profile is not None and "2.0" in result.agent.tool_profile
    out = layout["output"] / "run-1"
    document = json.loads((out / "result.json").read_text())
    assert document["recorded_version_status"] == "unverified"
    assert document["metadata"]["version"]["format_family"] == "claude-code/session-jsonl"
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["agent"]["version"] == "2.0.1" and manifest["agent"]["tool_semantics_version"] == "2.1.220"
    # the prefix keeps the recording's own lines (their version field included)
    prefix = next((out / "native" / "prefix").glob("*.jsonl")).read_text()
    assert '"version":"2.0.1"' in prefix.replace(" ", "")


def test_a_verified_recording_stays_verified(layout: dict[str, Path]) -> None:
    result = execute(_request(layout))
    assert (result.quality, result.quality_reasons, result.recorded_version_status) == ("verified", [], "verified")


def test_prepare_only_needs_no_workspace(layout: dict[str, Path]) -> None:
    """Issue 28 item 6: a prefix executes nothing, so a --workspace that does not exist is no refusal."""
    result = execute(_request(layout, workspace=str(layout["root"] / "absent")))
    assert result.failure is None, result.failure
    assert result.phase == "prepared"
    assert not (layout["root"] / "absent").exists()


@pytest.mark.parametrize("version", ["../../etc/passwd", "2.0.1" + "x" * 10_000, "9" * 10_000,
                                     "2.0.1\x1b[31m\n\x00evil",
                                     "/tmp/abs/path", "[red]markup[/red]"])
def test_a_hostile_version_string_is_only_a_label(layout: dict[str, Path], version: str) -> None:
    """The version field is input: it never becomes a path, and is shown escaped and bounded."""
    raw = version.encode().decode("unicode_escape")
    simple_session(2, version=raw).write(layout["trajectory"])
    before = sorted(p.name for p in layout["root"].iterdir())
    result = execute(_request(layout))
    assert result.failure is None, result.failure
    shown = result.recorded_version or ""
    assert len(shown) <= 64 and shown.isprintable()
    assert result.recorded_version_status == "unverified"
    assert result.agent is not None and result.agent.tool_semantics_version in ("2.1.220", "2.1.332")
    # nothing appeared outside the run's own directories
    assert sorted(p.name for p in layout["root"].iterdir()) == sorted({*before, "out", "state"})
    refused = execute(_request(layout, require_verified_version=True, run_id="run-2"))
    assert refused.exit_code == 11 and refused.failure is not None
    assert len(refused.failure.message) < 400 and "\x00" not in refused.failure.message.encode().decode()
    assert not (layout["output"] / "run-2").exists()


def test_output_directory_is_never_reused(layout: dict[str, Path]) -> None:
    assert execute(_request(layout)).exit_code == 0
    marker = layout["output"] / "run-1" / "result.json"
    before = marker.read_bytes()
    again = execute(_request(layout))
    assert again.failure is not None and again.failure.category == "executor_error"
    assert "already exists" in again.failure.message
    assert marker.read_bytes() == before


def test_an_uncertain_started_call_in_the_state_is_ambiguous(layout: dict[str, Path]) -> None:
    with Journal.open(layout["state"] / "run-1") as journal:
        journal.append("run_started", run_id="run-1")
        journal.append("tool_started", batch=1, call_id="toolu_x", tool="Bash")
    result = execute(_request(layout))
    assert result.failure is not None
    assert (result.failure.category, result.exit_code) == ("ambiguous_execution", 31)
    assert "toolu_x" in result.failure.message
    assert not (layout["output"] / "run-1").exists()


def test_step_budget_is_checked_before_anything_runs(layout: dict[str, Path]) -> None:
    result = execute(_request(layout, prepare_only=None, replay_only=True, max_steps=1))
    assert result.failure is not None and result.exit_code == 2
    assert "smaller than the selected replay prefix of 2 steps" in result.failure.message
    assert not (layout["output"] / "run-1").exists()


def test_a_run_id_whose_calls_already_ran_is_not_replayed_again(tmp_path: Path) -> None:
    """Reusing a state dir after tools ran would repeat their effects: refused (31), nothing runs."""
    from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

    workspace = tmp_path / "ws"
    workspace.mkdir()
    builder = ClaudeSessionBuilder(cwd=str(workspace))
    builder.user_prompt("append")
    builder.assistant([tool_use("t1", "Bash", {"command": "echo once >> marker.txt"})])
    builder.results({"t1": ""})
    builder.assistant([text("done")])
    session = builder.write(tmp_path / "s.jsonl")

    def replay(output: str) -> int:
        request = build_request({"agent": "claude-code", "trajectory": str(session), "after_step": 1,
                                 "replay_only": True, "workspace": str(workspace), "state_dir": str(tmp_path / "st"),
                                 "output_dir": str(tmp_path / output), "run_id": "same"}, source="test")
        return execute(request).exit_code

    assert replay("out1") == 0
    assert replay("out2") == 31
    assert (workspace / "marker.txt").read_text() == "once\n"
    assert not (tmp_path / "out2" / "same").exists()


def _final_name(path: str) -> str:
    """``.<name>.<random>.tmp`` (an atomic write's temp file) -> ``<name>``."""
    name = Path(path).name
    return name[1:].rsplit(".", 2)[0] if name.startswith(".") and name.endswith(".tmp") else name


@pytest.mark.parametrize("mode", ["prepare_only", "replay_only"])
def test_every_output_is_durable_before_the_result_that_names_it(
    layout: dict[str, Path], request: pytest.FixtureRequest, mode: str
) -> None:
    builder = ClaudeSessionBuilder(cwd=str(layout["workspace"]))  # replay-only runs in the recorded cwd
    builder.user_prompt("Do the task.")
    for index in (1, 2, 3):
        builder.assistant([text(f"step {index}"), tool_use(f"toolu_{index}", "Bash", {"command": f"echo {index}"})])
        builder.results({f"toolu_{index}": f"{index}"})
    builder.write(layout["trajectory"])
    synced: list[str] = request.getfixturevalue("fsynced_paths")  # from here on
    overrides: dict[str, object] = {"prepare_only": False, "replay_only": True} if mode == "replay_only" else {}
    result = execute(_request(layout, **overrides))
    assert result.failure is None
    out = layout["output"] / "run-1"
    files = {str(path.relative_to(out)) for path in out.rglob("*") if path.is_file()}
    synced_out = [p for p in synced if p.startswith(str(out))]
    names = [_final_name(p) for p in synced_out]
    assert names[-2:] == ["result.json", "run-1"]  # the result, then its directory (commits every rename there)
    assert {Path(f).name for f in files} <= set(names)  # every output file was fsync'd
    group = {"manifest.json", "replay-summary.json", "replay-events.jsonl"} | (
        {"observations.json"} if mode == "replay_only" else set())
    assert group <= set(names[:-2]) and len(synced_out) <= len(files) + 3  # no per-file directory fsyncs


def test_a_failed_run_commits_what_it_wrote_before_its_result(
    layout: dict[str, Path], request: pytest.FixtureRequest
) -> None:
    out = layout["output"] / "run-1"
    builder = ClaudeSessionBuilder(cwd=str(layout["workspace"]))
    builder.user_prompt("Do the task.")
    # a replayed command that puts a file where the rebuilt session's directory goes: the run fails after tools ran
    builder.assistant([tool_use("toolu_1", "Bash", {"command": f"touch {out}/native"})])
    builder.results({"toolu_1": ""})
    builder.assistant([text("Done.")])
    builder.write(layout["trajectory"])
    synced: list[str] = request.getfixturevalue("fsynced_paths")  # from here on
    result = execute(_request(layout, after_step=1, prepare_only=False, replay_only=True))
    assert result.failure is not None and result.replayed_tool_calls == 1
    names = [_final_name(p) for p in synced if p.startswith(str(out))]
    written = {path.name for path in out.iterdir() if path.is_file()} - {"native"}
    assert {"manifest.json", "observations.json", "replay-events.jsonl", "result.json"} <= written
    assert written <= set(names) and names[-2:] == ["result.json", "run-1"]


def test_a_call_refused_before_any_effect_does_not_block_a_rerun(tmp_path: Path) -> None:
    """A refusal before anything ran is no executed call: the run is 'prepared' with 0 calls re-run, and a later run
    with the same run id is not refused as ambiguous_execution."""
    workspace = tmp_path / "ws"
    workspace.mkdir()

    def session(arguments: dict[str, object], name: str) -> Path:
        builder = ClaudeSessionBuilder(cwd=str(workspace))
        builder.user_prompt("append")
        builder.assistant([tool_use("t1", "Bash", arguments)])
        builder.results({"t1": ""})
        builder.assistant([text("done")])
        return builder.write(tmp_path / name)

    def replay(trajectory: Path, output: str) -> tuple[int, object, object, int]:
        request = build_request({"agent": "claude-code", "trajectory": str(trajectory), "after_step": 1,
                                 "replay_only": True, "workspace": str(workspace), "state_dir": str(tmp_path / "st"),
                                 "output_dir": str(tmp_path / output), "run_id": "same"}, source="test")
        result = execute(request)
        return result.exit_code, result.phase, result.failure and result.failure.message, result.replayed_tool_calls

    refused = session({"command": 5}, "refused.jsonl")  # the executor refuses it before running anything
    assert replay(refused, "out1") == (30, "prepared", "Bash call has no string command", 0)
    fixed = session({"command": "echo once >> marker.txt"}, "fixed.jsonl")
    assert replay(fixed, "out2") == (0, "replayed", None, 1)
    assert (workspace / "marker.txt").read_text() == "once\n"


def test_a_replayed_fork_storm_is_stopped_at_max_processes_and_the_run_says_so(tmp_path: Path) -> None:
    """A recorded Bash call that forks until it fails: bounded by --max-processes (a pids cgroup), the run's
    metadata records the limit and that a command reached it, and none of the storm's processes survives."""
    from forkpoint.process import limits

    if limits._hierarchy_now().path is None:
        pytest.skip(f"no pids cgroup on this host: {limits._hierarchy_now().reason}")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    from tests.process.test_limits import STORM

    script = tmp_path / "storm.py"
    script.write_text(STORM)
    storm = f"{sys.executable} {script} pids.txt"
    builder = ClaudeSessionBuilder(cwd=str(workspace))
    builder.user_prompt("storm")
    builder.assistant([tool_use("t1", "Bash", {"command": storm})])
    builder.results({"t1": "300 0"})
    builder.assistant([text("done")])
    session = builder.write(tmp_path / "s.jsonl")
    request = build_request({"agent": "claude-code", "trajectory": str(session), "after_step": 1,
                             "replay_only": True, "workspace": str(workspace), "state_dir": str(tmp_path / "st"),
                             "output_dir": str(tmp_path / "out"), "run_id": "storm", "max_processes": 40},
                            source="test")
    result = execute(request)
    assert result.exit_code == 0
    facts = result.to_json()["metadata"]["process_limit"]
    assert facts["max_processes"] == 40 and facts["mechanism"] == "cgroup-v1-pids"
    assert facts["commands_at_limit"] == 1
    started = [int(pid) for pid in (workspace / "pids.txt").read_text().split()]
    assert len(started) < 40
    for pid in started:
        assert not os.path.exists(f"/proc/{pid}") or b") Z" in Path(f"/proc/{pid}/stat").read_bytes()


def test_after_step_all_replays_the_whole_recording_and_scores_it(tmp_path: Path) -> None:
    """The original's reward: `--after-step all --replay-only --score CMD` re-runs every batch and scores the
    final workspace; the verdict is result.json's top-level ``score``, the group id in metadata.scoring."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    builder = ClaudeSessionBuilder(cwd=str(workspace))
    builder.user_prompt("two steps")
    for index, value in enumerate(("0.5", "0.75"), start=1):
        builder.assistant([tool_use(f"t{index}", "Bash", {"command": f"echo {value} > reward.txt"})])
        builder.results({f"t{index}": ""})
    builder.assistant([text("done")])
    session = builder.write(tmp_path / "s.jsonl")
    request = build_request({"agent": "claude-code", "trajectory": str(session), "after_step": "all",
                             "replay_only": True, "workspace": str(workspace), "state_dir": str(tmp_path / "st"),
                             "output_dir": str(tmp_path / "out"), "run_id": "scored", "score": "cat reward.txt"},
                            source="test")
    result = execute(request)
    assert result.exit_code == 0 and result.after_step == 2
    document = json.loads((tmp_path / "out" / "scored" / "result.json").read_text())
    assert document["score"]["reward"] == 0.75 and document["score"]["format"] == "last-line"
    assert len(document["metadata"]["scoring"]["group_id"]) == 16


def test_score_options_are_validated_and_read_from_a_toml_score_table(tmp_path: Path,
                                                                      layout: dict[str, Path]) -> None:
    from forkpoint.core.errors import ReplayError
    from forkpoint.run.request import load_toml

    with pytest.raises(ReplayError, match="runs nothing"):
        _request(layout, score="true")
    with pytest.raises(ReplayError, match="score_format"):
        _request(layout, prepare_only=None, replay_only=True, score="true", score_format="yaml")
    with pytest.raises(ReplayError, match="after_step"):
        _request(layout, after_step="most")
    config = tmp_path / "run.toml"
    config.write_text(f'[replay]\nagent = "claude-code"\ntrajectory = "{layout["trajectory"]}"\nafter_step = "all"\n'
                      'replay_only = true\n[score]\ncommand = "pytest -q"\ntimeout = 30\nformat = "json"\n')
    request = load_toml(config)
    assert (request.score, request.score_timeout, request.score_format) == ("pytest -q", 30.0, "json")
    config.write_text(config.read_text() + "unknown = 1\n")
    with pytest.raises(ReplayError, match="unknown key"):
        load_toml(config)


@pytest.mark.e2e
def test_replay_with_branches_exits_with_their_failure_when_every_branch_failed(tmp_path: Path) -> None:
    """`forkpoint replay --branches 2` whose every branch fails (the upstream refuses connections: a bound port
    nobody listens on) exited 0 with a result claiming no failure; now it exits with the branches' category,
    retryable because every branch's failure was, and says all branches failed."""
    import socket
    import subprocess

    from forkpoint import runtimes

    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed (forkpoint agents install claude-code@2.1.332)")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "data.txt").write_text("data\n")
    builder = ClaudeSessionBuilder(session_id="00000000-0000-4000-8000-000000000001", cwd=str(workspace))
    builder.user_prompt("go")
    builder.assistant([text("x"), tool_use("toolu_0001", "Bash", {"command": "cat data.txt"})])
    builder.results({"toolu_0001": "data"})
    builder.assistant([text("Done.")])
    session = builder.write(tmp_path / "session.jsonl")
    with socket.socket() as closed:  # bound, never listening: every connection is refused
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}"
        done = subprocess.run(
            [sys.executable, "-m", "forkpoint.cli", "replay", "--agent", "claude-code", "--trajectory", str(session),
             "--after-step", "1", "--workspace", str(workspace), "--state-dir", str(tmp_path / "state"),
             "--output-dir", str(tmp_path / "out"), "--run-id", "r1", "--branches", "2", "--upstream", "anthropic",
             "--upstream-url", url, "--upstream-retries", "0"],
            capture_output=True, text=True, timeout=600, env={**os.environ, "ANTHROPIC_API_KEY": "k"})
    assert done.returncode == 40, (done.returncode, done.stderr[-2000:])
    assert "model_connection_error: all 2 branches failed (model_connection_error x2)" in done.stderr
    result = json.loads((tmp_path / "out" / "r1" / "result.json").read_text())
    assert result["failure"]["category"] == "model_connection_error" and result["failure"]["retryable"] is True
    assert result["metadata"]["branches"]["failed"] == 2
