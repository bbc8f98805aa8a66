"""End to end: a recording of one verified version continued by another (``--agent-version``), and the pairs
that are not proven refused (exit 11) with the list of the proven ones.

The pairs claimed in the specs' ``cross_versions`` are exactly the ones this file continues with the REAL
binaries; ScriptedModel plays the model upstream (the only stand-in). The same runs record the tool schemas
(``--record-tool-schemas``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.adapters import agent_spec
from forkpoint.adapters.codex.envelope import DEFERRED_TOOLS
from forkpoint.core.errors import ErrorKind
from forkpoint.export import export
from forkpoint.export.rows import ExportOptions
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import replay_recording

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures"
#: (agent, recorded version, continuing version, fixture, trajectory file, upstream, url suffix, key env)
PAIRS = (
    ("claude-code", "2.1.220", "2.1.332", "single_bash", "session.jsonl", "anthropic", "", "ANTHROPIC_API_KEY"),
    ("codex", "0.149.0", "0.171.0", "exec_basic", "rollout.jsonl", "openai-responses", "/v1", "OPENAI_API_KEY"),
)


def _require(agent: str, *versions: str) -> None:
    for version in versions:
        if runtimes.find(agent, version) is None:
            pytest.skip(f"{agent} {version} is not installed")


@pytest.mark.parametrize(("agent", "old", "new", "scenario", "trajectory", "upstream", "suffix", "key"), PAIRS,
                         ids=lambda v: str(v))
def test_continue_with_the_other_verified_version(agent: str, old: str, new: str, scenario: str, trajectory: str,
                                                  upstream: str, suffix: str, key: str, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    _require(agent, old, new)
    assert new in agent_spec(agent).cross_versions[old]  # the spec claims exactly the pairs proven here
    monkeypatch.setenv(key, "scripted-upstream-key")
    fixture = FIXTURES / agent.replace("-", "_") / old / scenario
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent=agent, trajectory=trajectory, after=1,
                                  upstream=upstream, upstream_url=url + suffix, agent_version=new,
                                  record_tool_schemas=True)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    assert result.metadata["recorded_agent_version"] == old
    assert result.metadata["continuing_agent_version"] == new
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    assert main
    out = Path(result.output_dir or "")
    if agent == "mini-swe-agent":  # 1.17.5 sends role + content (1.15 itself would send `extra` too)
        assert result.metadata["gate_wire_form"] == "1.17.5: role and content"
    if agent == "claude-code":  # the continuing binary is the one that asked (its billing header names it)
        assert f"cc_version={new}" in json.dumps(main[0]["body"])
    else:
        _assert_codex_envelope_gone(main[0]["body"], out)
    next_action = json.loads((out / "next-action.json").read_text())
    assert next_action["metrics"]["same_tool_calls"] is True, next_action
    # --record-tool-schemas: the agent's real tools, in OpenAI function form
    assert result.metadata["tool_schemas_recorded"] is True
    schemas = json.loads((out / "tool-schemas.json").read_text())
    names = {tool["function"]["name"] for tool in schemas["tools"]}
    assert all(tool["type"] == "function" and isinstance(tool["function"]["parameters"], dict)
               for tool in schemas["tools"])
    assert schemas["captured_from"] == "first validated request"
    assert ({"Bash", "Read"} if agent == "claude-code" else {"exec_command", "apply_patch"}) <= names, names
    # forkpoint export fills the tools column from it
    export([out], "messages-jsonl", tmp_path / "rows.jsonl", ExportOptions())
    rows = [json.loads(line) for line in (tmp_path / "rows.jsonl").read_text().splitlines()]
    assert rows and all(json.loads(row["tools"]) == schemas["tools"] and row["tools_source"] == "recorded"
                        for row in rows)


def test_pi_1_6_0_recordings_continue_on_pi_0_83_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Pi session names no version: a 1.x one (system message first) is read as 1.6.0 and ``--agent-version
    0.83.0`` continues it with the real 0.83.0. The rebuilt session goes to it unchanged; its first request
    carries exactly the recorded conversation (the gate validates it); only the system prompt is 0.83.0's own
    (0.83.0 does not take it from the session)."""
    old, new = "1.6.0", "0.83.0"
    _require("pi", old, new)
    assert new in agent_spec("pi").cross_versions[old]
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    fixture = FIXTURES / "pi" / old / "parallel"
    model = ScriptedModel.from_file(fixture / "script.json", model="scripted-model")
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent="pi", trajectory="events.jsonl", after=1,
                                  upstream="openai-chat", upstream_url=url + "/v1", agent_version=new)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    assert result.metadata["continuing_agent_version"] == new
    assert result.metadata["session_upgrade"]["read_as"] == old
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    recorded = next(json.loads(line)["body"] for line in (fixture / "requests.jsonl").read_text().splitlines()
                    if json.loads(line)["step"] == 1)
    assert main[0]["body"]["messages"][1:] == recorded["messages"][1:]
    out = Path(result.output_dir or "")
    assert json.loads((out / "next-action.json").read_text())["metrics"]["same_tool_calls"] is True


def test_pi_0_83_0_recordings_are_refused_on_pi_1_6_0_with_the_envelope_difference(tmp_path: Path) -> None:
    """Measured: 1.6.0 resuming a 0.83.0 session (no system message) sends no system prompt at all; the pair is
    refused before anything runs, saying so."""
    fixture = FIXTURES / "pi" / "0.83.0" / "parallel"
    result = replay_recording(fixture, tmp_path, agent="pi", trajectory="events.jsonl", after=1,
                              upstream="stub", agent_version="1.6.0")
    assert result.failure is not None and result.exit_code == 11
    assert "sends no system prompt at all" in result.failure.message
    assert "verified pairs: 1.6.0 -> 0.83.0" in result.failure.message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("agent", "old", "new"), [("claude-code", "2.1.332", "2.1.220"),
                                                   ("claude-code", "2.1.220", "9.9.9"),
                                                   ("codex", "0.171.0", "0.149.0")])  # not proven
def test_an_unproven_pair_is_refused_with_the_verified_pairs(agent: str, old: str, new: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    scenario, trajectory = ("single_bash", "session.jsonl") if agent == "claude-code" else ("exec_basic",
                                                                                          "rollout.jsonl")
    fixture = FIXTURES / agent.replace("-", "_") / old / scenario
    result = replay_recording(fixture, tmp_path, agent=agent, trajectory=trajectory, after=1, agent_version=new)
    assert result.failure is not None and result.exit_code == ErrorKind.UNSUPPORTED_VERSION.exit_code == 11
    pairs = agent_spec(agent).cross_version_pairs()
    assert f"verified pairs: {', '.join(pairs) or 'none'}" in result.failure.message, result.failure.message
    proven = "2.1.220 -> 2.1.332" if agent == "claude-code" else "0.149.0 -> 0.171.0"
    assert proven in result.failure.message


#: (agent, fixture version, scenario, trajectory, recorded text, old release, continuing version, upstream, suffix, key)
UNVERIFIED = (
    ("claude-code", "2.1.220", "single_bash", "session.jsonl", '"version":"2.1.220"', '"version":"2.0.27"',
     "2.1.332", "anthropic", "", "ANTHROPIC_API_KEY"),
    ("codex", "0.149.0", "exec_basic", "rollout.jsonl", '"cli_version":"0.149.0"', '"cli_version":"0.40.0"',
     "0.171.0", "openai-responses", "/v1", "OPENAI_API_KEY"),
    ("mini-swe-agent", "1.17.5", "basic", "trajectory.traj.json", '"mini_version": "1.17.5"',
     '"mini_version": "1.15.0"', "1.17.5", "openai-chat", "/v1", "OPENAI_API_KEY"),
)


@pytest.mark.parametrize(("agent", "fixture_version", "scenario", "trajectory", "field", "old_field", "new", "upstream",
                          "suffix", "key"), UNVERIFIED, ids=lambda v: str(v))
def test_a_recording_of_an_unverified_version_continues_on_the_newest_proven_binary(
        agent: str, fixture_version: str, scenario: str, trajectory: str, field: str, old_field: str, new: str,
        upstream: str, suffix: str, key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28: a real-binary recording whose version field names an older, never verified release is read as
    its nearest verified version, replayed (degraded: unverified_version), and continued by default by the newest
    verified version proven for it; the gate still proves the first request ends at the fresh observation."""
    _require(agent, fixture_version, new)
    monkeypatch.setenv(key, "scripted-upstream-key")
    fixture = FIXTURES / agent.replace("-", "_") / fixture_version / scenario
    text = (fixture / trajectory).read_text()
    assert field in text
    old = tmp_path / "recording" / trajectory
    old.parent.mkdir()
    old.write_text(text.replace(field, old_field))
    script = json.loads((fixture / "script.json").read_text())
    model = (ScriptedModel(script["turns"][1:], seed=script["seed"], step_mode="counter", model="scripted",
                           tools_required=script["tools_required"]) if agent == "mini-swe-agent"
             else ScriptedModel.from_file(fixture / "script.json"))
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent=agent, trajectory=old, after=1, upstream=upstream,
                                  upstream_url=url + suffix)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "degraded", "completed")
    assert result.quality_reasons == ["unverified_version"]
    assert result.recorded_version_status == "unverified" and result.recorded_version == old_field.split('"')[-2]
    assert result.agent is not None and result.agent.tool_semantics_version == fixture_version
    assert result.metadata["continuing_agent_version"] == new
    assert result.metadata["exact_observations"] == result.metadata["compared_observations"] >= 1
    upgrade = result.metadata["session_upgrade"]
    assert upgrade["recorded_version"] == result.recorded_version and upgrade["continuing_version"] == new
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0
    if agent == "mini-swe-agent":  # 1.17.5 sends role + content (1.15 itself would send `extra` too)
        assert result.metadata["gate_wire_form"] == "1.17.5: role and content"
    if agent == "claude-code":  # the continuing binary is the one that asked
        main = [entry for entry in model.requests if entry.get("kind") == "main"]
        assert f"cc_version={new}" in json.dumps(main[0]["body"])


def test_an_unverified_recording_refuses_an_unproven_continuing_version(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "unused")
    fixture = FIXTURES / "mini_swe_agent" / "1.17.5" / "basic"
    old = tmp_path / "old.traj.json"
    old.write_text((fixture / "trajectory.traj.json").read_text().replace('"mini_version": "1.17.5"',
                                                                           '"mini_version": "1.15.0"'))
    result = replay_recording(fixture, tmp_path, agent="mini-swe-agent", trajectory=old, after=1,
                              agent_version="2.4.6")  # verified, but another format family
    assert result.failure is not None and result.exit_code == 11, result.failure
    assert "read as 1.17.5" in result.failure.message and "not 2.4.6" in result.failure.message
    assert not (tmp_path / "out" / "run-1").exists()


def _assert_codex_envelope_gone(first: dict[str, object], out: Path) -> None:
    """0.171 asked (its base-instructions item first, no top-level instructions), the model saw no envelope
    (the prefix ends at the boundary output), and the continued rollout keeps none of it either."""
    items = first["input"]
    assert isinstance(items, list) and "instructions" not in first
    assert items[0]["role"] == "developer" and items[-1]["type"] == "function_call_output"
    assert DEFERRED_TOOLS.text not in json.dumps(first)
    continued = next((out / "native" / "continued").glob("rollout-*.jsonl")).read_text()
    records = [json.loads(line) for line in continued.splitlines()]
    developer = [r for r in records if r["type"] == "response_item" and r["payload"].get("role") == "developer"]
    assert len(developer) == 1 and DEFERRED_TOOLS.text not in continued  # the recording's own, nothing added
    assert "__forkpoint_nonce_" not in continued


@pytest.mark.parametrize("recorded", ["2.0.27", "1.0.128"])
def test_a_real_old_line_recording_continues_on_the_newest_verified_binary(recorded: str, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A session the REAL Claude Code 2.0.27 or 1.0.128 wrote (fixture <version>/old_line: Read, Write, Edit,
    TodoWrite, Bash, parallel calls) is replayed with its measured old-line tool profile (every observation exact,
    TodoWrite re-run) and continued by 2.1.332 through the gate; 2.1.332's own notice that the session's model is
    retired stays in the continued session between the boundary and its first turn."""
    _require("claude-code", "2.1.332")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted-upstream-key")
    fixture = FIXTURES / "claude_code" / recorded / "old_line"
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent="claude-code", trajectory="session.jsonl", after=10,
                                  upstream="anthropic", upstream_url=url)
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "degraded", "completed")
    assert result.quality_reasons == ["unverified_version"] and result.recorded_version == recorded
    assert result.metadata["exact_observations"] == result.metadata["compared_observations"] == 13
    assert result.metadata["continuing_agent_version"] == "2.1.332"
    assert result.metadata["session_upgrade"]["derivations"] == []
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    assert "cc_version=2.1.332" in json.dumps(main[0]["body"])
    continued = next((tmp_path / "out" / "run-10" / "native" / "continued").glob("*.jsonl")).read_text()
    assert "could not be restored (retired)" in continued


def test_a_real_codex_040_recording_reruns_its_shell_calls_and_continues_on_0171(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rollout the REAL Codex 0.40.0 wrote (``shell`` tool, JSON outputs): its shell calls re-run with 0.40's
    semantics (exact after the documented duration mask), the result names that profile, and the newest verified
    binary (0.171.0) continues it through the gate."""
    _require("codex", "0.171.0")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    fixture = FIXTURES / "codex" / "0.40.0" / "shell_040"
    model = ScriptedModel([[{"type": "text", "text": "Continued after the 0.40 prefix."}]], seed="codex/040-cont",
                          model="gpt-5.5")
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent="codex", trajectory="rollout.jsonl", after=3,
                                  upstream="openai-responses", upstream_url=url + "/v1")
    assert result.failure is None, result.failure
    assert (result.phase, result.agent_status, result.quality_reasons) == ("continued", "completed",
                                                                             ["unverified_version"])
    assert result.recorded_version == "0.40.0" and result.metadata["continuing_agent_version"] == "0.171.0"
    assert result.metadata["exact_observations"] == result.metadata["compared_observations"] == 3
    notes = result.metadata["version"]["version_notes"]
    assert any("Codex 0.40.0's shell tool" in note for note in notes), notes
    assert result.metadata["model_bridge"]["validated"] >= 1 and result.metadata["model_bridge"]["refused"] == 0


def test_a_real_1_2_recording_reruns_with_its_own_line_and_continues_on_a_verified_binary(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session the REAL OpenCode 1.2.6 wrote (fixture 1.2.6/old_line: read with its 1.2 line layout, grep, glob,
    two failed calls whose texts start with ``Error: ``, edit, write, bash): its calls re-run with the 1.2 tool
    profile (1.2.6's own binary; 1.17's differ in 5 of 9), every observation exact, and the verified binary it is
    read as (1.17.11: no OpenCode cross-version pair is proven) continues the rebuilt session through the gate."""
    _require("opencode", "1.2.6", "1.17.11")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    fixture = FIXTURES / "opencode" / "1.2.6" / "old_line"
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent="opencode", trajectory="export.json", after=5,
                                  upstream="openai-chat", upstream_url=url + "/v1")
    assert result.failure is None, result.failure
    assert (result.phase, result.agent_status, result.quality_reasons) == ("continued", "completed",
                                                                             ["unverified_version"])
    assert result.recorded_version == "1.2.6" and result.metadata["continuing_agent_version"] == "1.17.11"
    assert result.metadata["exact_observations"] == result.metadata["compared_observations"] == 9
    notes = result.metadata["version"]["version_notes"]
    assert any("opencode 1.2 (measured on 1.2.6) tool profile: OpenCode 1.2.6's own binary" in n for n in notes), notes
    assert result.metadata["model_bridge"]["validated"] >= 1 and result.metadata["model_bridge"]["refused"] == 0
