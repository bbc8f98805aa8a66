"""End to end with the REAL claude binaries: replay + continue recorded sessions through the bridge.

ScriptedModel plays the model upstream (the only stand-in). Every recorded session is replayed at every
boundary in a workspace restored to the recording's initial state at the recorded path; the gate must pass,
the observations must be exact, and the real claude must execute the scripted next action.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.core.model import CallPolicy
from forkpoint.core.results import ReplayResult
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import e2e_boundaries, replay_recording

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures" / "claude_code"
VERSIONS = ("2.1.220", "2.1.332")
CONTINUE_SCENARIOS = ("single_bash", "parallel", "file_tools", "cd_persist", "error_result", "large_output",
                      "read_media", "cd_continue")


def _cases() -> list[tuple[str, str, int]]:
    cases = []
    for version in VERSIONS:
        for scenario in CONTINUE_SCENARIOS:
            session = FIXTURES / version / scenario / "session.jsonl"
            if session.exists():
                parsed = parse_session(session)
                # read_media: no boundary after a resized image's note
                usable = [n for n in range(1, parsed.complete_count + 1) if n not in parsed.boundary_refusals]
                # first, middle and last on the newest version; the last on the older one (sampled for CI time:
                # the envelope differs per version, the earlier boundaries repeat the same path with a shorter
                # prefix); FORKPOINT_E2E_EVERY_BOUNDARY=1 runs every boundary of both
                wide = version == VERSIONS[-1] or os.environ.get("FORKPOINT_E2E_EVERY_BOUNDARY") == "1"
                chosen = e2e_boundaries(usable) if wide else usable[-1:]
                cases += [(version, scenario, after) for after in chosen]
    return cases


def _require_runtime(version: str) -> None:
    if runtimes.find("claude-code", version) is None:
        pytest.skip(f"claude-code {version} is not installed (forkpoint agents install claude-code@{version})")


@pytest.fixture()
def upstream_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted-upstream-key")
    yield


def run(fixture: Path, tmp_path: Path, after: int, **overrides: Any) -> ReplayResult:
    return replay_recording(fixture, tmp_path, agent="claude-code", trajectory="session.jsonl", after=after,
                            **overrides)


@pytest.mark.parametrize(("version", "scenario", "after"), _cases(), ids=lambda v: str(v))
def test_replay_and_continue_every_boundary(
    version: str, scenario: str, after: int, tmp_path: Path, upstream_key: None
) -> None:
    _require_runtime(version)
    fixture = FIXTURES / version / scenario
    model = ScriptedModel.from_file(fixture / "script.json")
    batches = parse_session(fixture / "session.jsonl").batches[:after]
    # read_media: a resized image (both versions) and 2.1.220's PDF stay stale, exactly those calls.
    stale = any(call.policy is CallPolicy.STALE for batch in batches for call in batch.calls)
    with model.serve() as url:
        result = run(fixture, tmp_path, after, upstream="anthropic", upstream_url=url,
                     allow_stale_observations=stale)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality) == ("continued", "degraded" if stale else "verified")
    assert result.agent_status == "completed"
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0 and bridge["forwarded"] == bridge["validated"]
    reported = model.reported_usage()  # model_usage: the sums of what ScriptedModel's answers reported
    assert {key: result.metadata["model_usage"][key] for key in reported} == reported
    assert reported["calls"] == bridge["forwarded"] == reported["calls_with_usage"]
    assert reported["input_tokens"] == 100 * reported["calls"]
    out = Path(result.output_dir or "")
    observations = json.loads((out / "observations.json").read_text())["observations"]
    assert observations and all(row["exact"] or row["stale_reused"] for row in observations), observations
    assert [row["id"] for row in observations if row["stale_reused"]] == [
        call.call_id for batch in batches for call in batch.calls if call.policy is CallPolicy.STALE]
    # The first model request the upstream saw ends exactly at O'N (the nonce envelope is gone).
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    first = main[0]["body"]["messages"]
    boundary_ids = {call.call_id for call in batches[after - 1].calls}
    assert {row["id"] for row in observations if row["batch"] == after} <= boundary_ids
    last_blocks = first[-1]["content"]
    assert first[-1]["role"] == "user"
    assert {block["tool_use_id"] for block in last_blocks if block.get("type") == "tool_result"} == boundary_ids
    assert all(block.get("type") == "tool_result" for block in last_blocks)
    assert "__forkpoint_nonce_" not in json.dumps(main)
    # The real claude executed the scripted next action (same tools and arguments as the original).
    next_action = json.loads((out / "next-action.json").read_text())
    assert next_action["replayed"] is not None
    assert next_action["metrics"]["same_tool_calls"] is True, next_action
    continued = out / "native" / "continued"
    assert any(continued.glob("*.jsonl"))
    assert "__forkpoint_nonce_" not in "".join(p.read_text() for p in continued.glob("*.jsonl"))


def _live_results(continued: Path, after: int) -> list[str]:
    """The tool_result texts the continued (live) agent got, in order."""
    parsed = parse_session(continued)
    return [str(call.historical.content) for batch in parsed.batches[after:] for call in batch.calls
            if call.historical is not None]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("after", [1, 2])
def test_continued_agent_resumes_in_the_replayed_shell_directory(
    version: str, after: int, tmp_path: Path, upstream_key: None
) -> None:
    """After a replayed `cd pkg`, the live commands run in pkg/ as the original's did (not in the project root)."""
    _require_runtime(version)
    fixture = FIXTURES / version / "cd_continue"
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture, tmp_path, after, upstream="anthropic", upstream_url=url)
    assert result.failure is None, result.failure
    assert result.quality == "verified" and result.metadata["model_bridge"]["refused"] == 0
    continued = next((Path(result.output_dir or "") / "native" / "continued").glob("*.jsonl"))
    live = _live_results(continued, after)
    expected = ["inside", "/tmp/forkpoint-rec/cd_continue/pkg\nmarker.txt"][after - 1:]
    assert live == expected
    assert result.metadata["shell_cwd"] == {"replayed": "pkg", "restored": True, "project_root": "pkg"}
    # The model is never told the shell moved back to the root (the gate removes Claude's trailing messages).
    first = next(e for e in model.requests if e.get("kind") == "main")["body"]["messages"]
    assert "Primary working directory: /tmp/forkpoint-rec/cd_continue (was" not in json.dumps(first)


@pytest.mark.parametrize("version", VERSIONS)
def test_stub_upstream_proves_the_session_was_accepted(version: str, tmp_path: Path) -> None:
    _require_runtime(version)
    result = run(FIXTURES / version / "single_bash", tmp_path, 1, upstream="stub")
    assert result.failure is None, result.failure
    assert result.phase == "continued" and result.metadata["model_bridge"]["validated"] >= 1


@pytest.mark.parametrize("version", VERSIONS)
def test_boundary_prompt_is_one_user_message_after_the_last_observation(
    version: str, tmp_path: Path, upstream_key: None
) -> None:
    _require_runtime(version)
    fixture = FIXTURES / version / "single_bash"
    prompt = "Before going on, double-check the listing."
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture, tmp_path, 1, upstream="anthropic", upstream_url=url, boundary_user_prompt=prompt)
    assert result.failure is None, result.failure
    assert result.metadata["input_condition"] == "boundary_user_prompt_appended"
    assert result.metadata["boundary_user_prompt"]["injected"] is True
    first = next(e for e in model.requests if e.get("kind") == "main")["body"]["messages"]
    assert first[-1] == {"role": "user", "content": prompt} or first[-1]["content"][-1]["text"] == prompt
    assert first[-2]["content"][0]["type"] == "tool_result"
    out = Path(result.output_dir or "")
    for name in ("result.json", "replay-summary.json", "replay-events.jsonl", "manifest.json"):
        assert prompt not in (out / name).read_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_max_steps_stops_the_continuation(version: str, tmp_path: Path, upstream_key: None) -> None:
    _require_runtime(version)
    fixture = FIXTURES / version / "single_bash"
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture, tmp_path, 1, upstream="anthropic", upstream_url=url, max_steps=2)
    assert result.failure is None, result.failure
    # max_steps is the TOTAL: 1 replayed batch + 1 live turn (the scripted Read), then claude stops.
    assert result.agent_status == "max_steps"
    assert result.continued_steps == 1
    assert len([e for e in model.requests if e.get("kind") == "main"]) == 1


def test_wrong_binary_version_is_refused(tmp_path: Path) -> None:
    _require_runtime("2.1.332")
    other = runtimes.find("claude-code", "2.1.332")
    assert other is not None
    result = run(FIXTURES / "2.1.220" / "single_bash", tmp_path, 1, upstream="stub",
                 agent_entrypoint=str(other.entrypoint))
    assert result.failure is not None
    assert (result.failure.category, result.exit_code) == ("unsupported_version", 11)
    assert not (tmp_path / "out" / "run-1").exists()


@pytest.mark.parametrize("version", VERSIONS)
def test_stale_calls_refused_then_degraded(version: str, tmp_path: Path) -> None:
    fixture = FIXTURES / version / "stale_tools"
    refused = run(fixture, tmp_path, 3, replay_only=True)
    assert refused.failure is not None and refused.exit_code == 10
    assert "--allow-stale-observations" in refused.failure.message
    degraded = run(fixture, tmp_path, 3, replay_only=True, allow_stale_observations=True, run_id="degraded")
    assert degraded.failure is None, degraded.failure
    assert degraded.quality == "degraded" and degraded.phase == "replayed"
    assert len(degraded.metadata["stale_observations_reused"]) == 2
    assert degraded.replayed_tool_calls == 1


def test_a_workspace_elsewhere_is_refused_with_the_way_out(tmp_path: Path) -> None:
    fixture = FIXTURES / "2.1.332" / "single_bash"
    elsewhere = tmp_path / "ws"
    elsewhere.mkdir()
    result = run(fixture, tmp_path, 1, replay_only=True, workspace=str(elsewhere))
    assert result.failure is not None and result.exit_code == 20
    message = result.failure.message
    assert "--sandbox bwrap" in message
    assert f"--path-map /tmp/forkpoint-rec/single_bash={elsewhere.resolve()}" in message


def test_no_process_left_behind(tmp_path: Path) -> None:
    """After a continuation, no process of this run (recognised by its isolated HOME) survives."""
    _require_runtime("2.1.332")
    result = run(FIXTURES / "2.1.332" / "single_bash", tmp_path, 1, upstream="stub")
    assert result.failure is None, result.failure
    marker = f"HOME={tmp_path / 'state' / 'run-1' / 'home'}".encode()
    survivors = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
        except OSError:
            continue
        if marker in environ.split(b"\0"):
            survivors.append(proc.name)
    assert not survivors


def test_a_short_upstream_key_does_not_corrupt_the_relayed_stream(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Local OpenAI-compatible servers are often given a key like "x" or "EMPTY": it is not redacted from the
    relayed stream (it would replace every such letter in the model's answer and break its tool calls)."""
    _require_runtime("2.1.332")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    fixture = FIXTURES / "2.1.332" / "single_bash"
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture, tmp_path, 1, upstream="anthropic", upstream_url=url)
    assert result.failure is None, result.failure
    assert [entry["step"] for entry in model.requests if entry.get("kind") == "main"] == [1, 2]


def _recorded_results(session: Path, after: int) -> list[str]:
    parsed = parse_session(session)
    return [str(call.historical.content) for batch in parsed.batches[after:] for call in batch.calls
            if call.historical is not None]


def _continue_exactly(scenario: str, after: int, tmp_path: Path) -> tuple[Path, Path]:
    """Replay ``scenario`` up to ``after`` (every observation exact, none stale), continue it with the real claude;
    the fixture and the continued session."""
    _require_runtime("2.1.332")
    fixture = FIXTURES / "2.1.332" / scenario
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture, tmp_path, after, upstream="anthropic", upstream_url=url)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    out = Path(result.output_dir or "")
    observations = json.loads((out / "observations.json").read_text())["observations"]
    assert len(observations) == after and all(row["exact"] and not row["stale_reused"] for row in observations)
    return fixture, next((out / "native" / "continued").glob("*.jsonl"))


def test_task_tools_replayed_exactly_then_the_live_claude_works_on_the_replayed_list(
    tmp_path: Path, upstream_key: None
) -> None:
    """TaskCreate/Update/List/Get re-run (not stale) and leave Claude's own task files: the live claude's task
    calls see the replayed tasks, so every live result equals the original's (ids continue, blockers, deletes).
    The recording named its tools (``--tools``); the continuation gets the same set from the session file."""
    fixture, continued = _continue_exactly("tasks", 8, tmp_path)
    assert _live_results(continued, 8) == _recorded_results(fixture / "session.jsonl", 8)


def test_notebook_edits_replayed_exactly_then_continued(tmp_path: Path, upstream_key: None) -> None:
    """NotebookEdit re-runs (not refused): the notebook holds the original's bytes at the boundary (inserted ids are
    the recorded ones). A resumed claude restores only text Reads into its read state (measured), so its live
    edits of demo.ipynb are refused "not read yet" exactly as a plain ``--resume`` does, and demo.ipynb stays
    as replayed; the notebooks it reads live are edited to the original's final bytes."""
    fixture, continued = _continue_exactly("notebook_edit", 4, tmp_path)
    live = _live_results(continued, 4)
    recorded = _recorded_results(fixture / "session.jsonl", 4)
    not_read = "<tool_use_error>File has not been read yet. Read it first before writing to it.</tool_use_error>"
    assert live[:5] == [not_read] * 5 and live[5:] == recorded[5:]  # 5: the unknown cell id, same refusal first
    workspace = Path(json.loads((fixture / "meta.json").read_text())["cwd"])
    for name in ("old.ipynb", "crlf.ipynb"):
        assert (workspace / name).read_bytes() == (fixture / "workspace-final" / name).read_bytes()
    lines = [json.loads(line) for line in (fixture / "session.jsonl").read_text().splitlines()]
    at_boundary = [line["toolUseResult"]["updated_file"] for line in lines
                   if isinstance(line.get("toolUseResult"), dict) and "updated_file" in line["toolUseResult"]][2]
    assert (workspace / "demo.ipynb").read_text() == at_boundary


@pytest.mark.parametrize("version", VERSIONS)
def test_enter_plan_mode_re_run_then_continued(version: str, tmp_path: Path, upstream_key: None) -> None:
    """EnterPlanMode (recorded in SDK mode, where a person answers) is re-run, not stale: verified, no flag; the
    question and the plan approval after it re-run from the recorded answers (exact, no flag), marked
    ``answer_from_recording``."""
    _require_runtime(version)
    fixture = FIXTURES / version / "interactive_tools"
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture, tmp_path, 1, upstream="anthropic", upstream_url=url)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality) == ("continued", "verified")
    observations = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
    assert [(row["name"], row["exact"], row["stale_reused"]) for row in observations] == [
        ("EnterPlanMode", True, False)]
    answered = run(fixture, tmp_path, 3, replay_only=True, run_id="after-question")
    assert answered.failure is None, answered.failure
    assert answered.quality_reasons == ["answer_from_recording"]
    rows = json.loads((Path(answered.output_dir or "") / "observations.json").read_text())["observations"]
    assert [(row["name"], row["exact"], row["stale_reused"], row.get("note")) for row in rows] == [
        ("EnterPlanMode", True, False, None), ("AskUserQuestion", True, False, "answer_from_recording"),
        ("ExitPlanMode", True, False, "answer_from_recording")]


@pytest.mark.parametrize("version", VERSIONS)
def test_subagent_calls_re_run_then_continued(version: str, tmp_path: Path, upstream_key: None) -> None:
    """A foreground sub-agent (Agent): its own calls re-run in order in the same workspace (exact), its answer is
    reused (``subagent_answer_reused``), the rebuilt session carries its transcript under
    ``<session-id>/subagents/`` in the continued claude's home, the gate passes, and the live claude's next call
    reads what the sub-agent wrote: the original's result."""
    _require_runtime(version)
    fixture = FIXTURES / version / "subagent"
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture, tmp_path, 2, upstream="anthropic", upstream_url=url)
    assert result.failure is None, result.failure
    assert (result.phase, result.agent_status) == ("continued", "completed")
    assert result.quality_reasons == ["subagent_answer_reused"]
    assert result.metadata["model_bridge"]["refused"] == 0
    out = Path(result.output_dir or "")
    observations = json.loads((out / "observations.json").read_text())["observations"]
    assert [row["subagent"] is not None for row in observations] == [False, True, True, True, False]
    assert all(row["exact"] for row in observations[:4])
    assert observations[4]["reused"] == "subagent_answer_reused"
    homes = list((tmp_path / "state").rglob("subagents/agent-*.jsonl"))
    assert homes, "the continued claude's home has no sub-agent transcript"
    continued = next((out / "native" / "continued").glob("*.jsonl"))
    assert _live_results(continued, 2)[:1] == ["from-sub\nbase"]


def test_mcp_calls_re_run_against_the_users_server_then_continued(tmp_path: Path, upstream_key: None) -> None:
    """--mcp-config: the recorded MCP calls re-run against a real server (written with the official SDK) exactly, its
    effect (count.txt) is in the workspace at the boundary, the gate passes, and the live claude's next command sees
    it: the original's result."""
    pytest.importorskip("mcp")
    _require_runtime("2.1.332")
    fixture = FIXTURES / "2.1.332" / "mcp_tools"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"tiny": {
        "command": sys.executable, "args": ["-m", "forkpoint.testing.mcp_server"],
        "env": {"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}}}}))
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture, tmp_path, 5, upstream="anthropic", upstream_url=url, mcp_config=str(config))
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    out = Path(result.output_dir or "")
    observations = json.loads((out / "observations.json").read_text())["observations"]
    assert len(observations) == 5 and all(row["exact"] for row in observations)
    continued = next((out / "native" / "continued").glob("*.jsonl"))
    assert _live_results(continued, 5)[:1] == ["count.txt has one line"]


@pytest.mark.parametrize("sandbox", ["local", "bwrap"])
def test_the_continued_claude_calls_the_users_mcp_server_live(sandbox: str, tmp_path: Path, upstream_key: None) -> None:
    """--mcp-config also reaches the continued claude (issue 29): after the replayed echo/plain/two calls, the LIVE
    claude's scripted ``mcp__tiny__count`` runs against the user's server (started by claude itself, in its cwd,
    inside the run's sandbox: under bwrap the server's interpreter and PYTHONPATH are made visible), writes count.txt
    in the workspace and answers ``first: 1``; the gate validated every request with the server's tools in them."""
    pytest.importorskip("mcp")
    if sandbox == "bwrap" and shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    _require_runtime("2.1.332")
    fixture = FIXTURES / "2.1.332" / "mcp_tools"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"tiny": {
        "command": sys.executable, "args": ["-m", "forkpoint.testing.mcp_server"],
        "env": {"PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}}}}))
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture, tmp_path, 4, upstream="anthropic", upstream_url=url, mcp_config=str(config),
                     sandbox=sandbox)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    bridge = result.metadata["model_bridge"]
    assert bridge["refused"] == 0 and bridge["validated"] == bridge["model_requests"] >= 3
    tool_names = [name for entry in model.requests if isinstance(entry.get("body"), dict)
                  for name in (tool.get("name") for tool in entry["body"].get("tools") or [])]
    assert "mcp__tiny__count" in tool_names or "ToolSearch" in tool_names
    continued = next((Path(result.output_dir or "") / "native" / "continued").glob("*.jsonl"))
    live = _live_results(continued, 4)
    assert live[:2] == ["[{'type': 'text', 'text': 'first: 1'}]", "count.txt has one line"], live
    assert live[2].startswith("Error executing tool fail"), live


def test_the_continued_claude_reaches_an_http_mcp_server_on_loopback(tmp_path: Path, upstream_key: None) -> None:
    """An HTTP (Streamable HTTP) server of --mcp-config on 127.0.0.1: the replay re-runs the recorded calls against it
    and the LIVE claude (local sandbox: loopback reachable) calls it too: its ``count`` answers ``first: 1`` and
    writes count.txt in the SERVER's directory (the user's server, not the workspace)."""
    pytest.importorskip("mcp")
    _require_runtime("2.1.332")
    server_dir = tmp_path / "server"
    server_dir.mkdir()
    port_file = server_dir / "port"
    server = subprocess.Popen([sys.executable, "-m", "forkpoint.testing.mcp_server", "http", str(port_file)],
                              env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")},
                              cwd=server_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not (port_file.is_file() and port_file.read_text()):  # until it listens (bounded)
            assert time.monotonic() < deadline and server.poll() is None, "the HTTP MCP server did not start"
            time.sleep(0.05)
        config = tmp_path / "mcp.json"
        config.write_text(json.dumps({"mcpServers": {"tiny": {
            "type": "http", "url": f"http://127.0.0.1:{port_file.read_text()}/mcp"}}}))
        fixture = FIXTURES / "2.1.332" / "mcp_tools"
        model = ScriptedModel.from_file(fixture / "script.json")
        with model.serve() as url:
            result = run(fixture, tmp_path, 4, upstream="anthropic", upstream_url=url, mcp_config=str(config))
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()
    assert result.failure is None, result.failure
    assert result.phase == "continued" and result.metadata["model_bridge"]["refused"] == 0
    continued = next((Path(result.output_dir or "") / "native" / "continued").glob("*.jsonl"))
    assert _live_results(continued, 4)[:1] == ["[{'type': 'text', 'text': 'first: 1'}]"]
    assert (server_dir / "count.txt").read_text() == "first\n"
