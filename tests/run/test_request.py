"""Every validation message of the request model, from flags, TOML and JSON alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import Mode
from forkpoint.run.request import REQUEST_SCHEMA, build_request, load_json_request, load_toml


def _refusal(values: dict[str, object]) -> ReplayError:
    with pytest.raises(ReplayError) as info:
        build_request(values, source="test")
    assert info.value.kind is ErrorKind.CONFIGURATION
    return info.value


BASE = {"agent": "claude-code", "trajectory": "t.jsonl", "after_step": 1}


def test_defaults_and_modes() -> None:
    request = build_request(dict(BASE), source="test")
    assert request.mode is Mode.REPLAY_AND_CONTINUE
    assert request.workspace == Path(".")
    assert build_request({**BASE, "prepare_only": True}, source="t").mode is Mode.PREPARE_ONLY
    assert build_request({**BASE, "replay_only": True}, source="t").mode is Mode.REPLAY_ONLY
    assert request.resolved_run_id().startswith("replay-")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"after_step": 0}, "after_step must be a positive complete batch ordinal"),
        ({"after_step": -3}, "after_step must be a positive complete batch ordinal"),
        ({"max_steps": 0}, "max_steps must be positive"),
        ({"boundary_user_prompt": " \n\t"}, "boundary_user_prompt must contain a non-whitespace character"),
        ({"run_id": "bad id"}, "run_id may contain only letters, digits, '-' and '_'"),
        ({"run_id": "../x"}, "run_id may contain only letters, digits, '-' and '_'"),
        ({"prepare_only": True, "replay_only": True}, "prepare_only and replay_only are mutually exclusive"),
        ({"agent": "gpt-engineer"}, "unsupported agent 'gpt-engineer'; expected one of: claude-code, codex"),
        ({"colour": "blue"}, "unknown key(s) colour"),
        ({"after_step": "2"}, "after_step: input should be a valid integer"),
        ({"after_step": True}, "after_step: input should be a valid integer"),
        ({"prepare_only": "yes"}, "prepare_only must be true or false"),
        ({"trajectory": ""}, "trajectory must be a non-empty path string"),
        ({"after_step": 2.0}, "after_step: input should be a valid integer"),
        ({"max_steps": "3"}, "max_steps: input should be a valid integer"),
        ({"agent": 7}, "agent: input should be a valid string"),
        ({"allow_stale_observations": 1}, "allow_stale_observations: input should be a valid boolean"),
        ({"path_map": ("/a=/b",)}, "path_map: input should be a valid list"),
        ({"path_map": ["/a=/b", 3]}, "path_map.1: input should be a valid string"),
        ({"workspace_from": ["x"]}, "workspace_from: input should be a valid string"),
        ({"branches": 2, "keep_snapshot": False}, "drop_snapshot (--drop-snapshot) cannot be combined with branches"),
        ({"branch_prompts": ["a"], "keep_snapshot": False}, "cannot be combined with branches"),
    ],
)
def test_validation_messages(change: dict[str, object], message: str) -> None:
    assert message in _refusal({**BASE, **change}).message


def test_missing_required_keys() -> None:
    assert "missing required key 'after_step'" in _refusal({"agent": "claude-code", "trajectory": "t"}).message


def test_empty_boundary_prompt_means_absent() -> None:
    assert build_request({**BASE, "boundary_user_prompt": ""}, source="t").boundary_user_prompt == ""


def test_toml_table_is_strict_and_paths_are_relative_to_the_file(tmp_path: Path) -> None:
    config = tmp_path / "replay.toml"
    config.write_text('[replay]\nagent = "claude-code"\ntrajectory = "s.jsonl"\nafter_step = 2\nprepare_only = true\n')
    request = load_toml(config)
    assert request.trajectory == tmp_path / "s.jsonl"
    assert request.mode is Mode.PREPARE_ONLY and request.after_step == 2

    config.write_text('[replay]\nagent = "claude-code"\ntrajectory = "s"\nafter_step = 1\nspeed = 3\n')
    with pytest.raises(ReplayError, match="unknown key"):
        load_toml(config)
    config.write_text('[replay]\nagent = "claude-code"\ntrajectory = "s"\nafter_step = 1\n[gateway]\nx = 1\n')
    with pytest.raises(ReplayError, match="unknown table"):
        load_toml(config)
    config.write_text("[replay\n")
    with pytest.raises(ReplayError, match="parse replay config"):
        load_toml(config)
    config.write_text("x = 1\n")
    with pytest.raises(ReplayError, match="unknown table"):
        load_toml(config)
    with pytest.raises(ReplayError, match="does not exist"):
        load_toml(tmp_path / "absent.toml")


def test_json_request_needs_the_schema_and_strict_keys(tmp_path: Path) -> None:
    path = tmp_path / "request.json"
    document = {"schema_version": REQUEST_SCHEMA, **BASE, "replay_only": True, "max_steps": 4}
    path.write_text(json.dumps(document))
    request = load_json_request(path)
    assert request.mode is Mode.REPLAY_ONLY and request.max_steps == 4

    path.write_text(json.dumps({**document, "schema_version": "other/v9"}))
    with pytest.raises(ReplayError, match=r'schema_version must be "forkpoint\.request/v1"'):
        load_json_request(path)
    path.write_text(json.dumps({**document, "surprise": 1}))
    with pytest.raises(ReplayError, match="unknown key"):
        load_json_request(path)
    path.write_text("[]")
    with pytest.raises(ReplayError, match="must be a JSON object"):
        load_json_request(path)
    path.write_text("{")
    with pytest.raises(ReplayError, match="parse request"):
        load_json_request(path)


def test_every_type_error_is_reported_in_field_order() -> None:
    message = _refusal({**BASE, "workspace_from": 1, "path_map": "x", "max_steps": "y"}).message
    assert message == ("test: max_steps: input should be a valid integer; path_map: input should be a valid list; "
                       "workspace_from: input should be a valid string")


def test_request_is_immutable() -> None:
    import dataclasses

    request = build_request(dict(BASE), source="test")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.after_step = 2  # type: ignore[misc]


def test_max_trajectory_bytes_defaults_to_256_mib_and_is_a_strict_positive_key(tmp_path: Path) -> None:
    assert build_request(dict(BASE), source="t").max_trajectory_bytes == 256 * 1024 * 1024
    assert "max_trajectory_bytes must be positive" in _refusal({**BASE, "max_trajectory_bytes": 0}).message
    assert "max_trajectory_bytes: input should be a valid integer" in _refusal(
        {**BASE, "max_trajectory_bytes": "1000"}).message
    config = tmp_path / "replay.toml"
    config.write_text('[replay]\nagent = "codex"\ntrajectory = "r.jsonl"\nafter_step = 1\n'
                      "max_trajectory_bytes = 1000000\n")
    assert load_toml(config).max_trajectory_bytes == 1_000_000
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"schema_version": REQUEST_SCHEMA, **BASE, "max_trajectory_bytes": 5}))
    assert load_json_request(request).max_trajectory_bytes == 5


def test_opencode_export_completes_an_opencode_event_log_only(tmp_path: Path) -> None:
    request = build_request({**BASE, "agent": "opencode", "opencode_export": "ses.json"}, source="test")
    assert request.opencode_export == Path("ses.json")
    message = _refusal({**BASE, "agent": "codex", "opencode_export": "ses.json"}).message
    assert "opencode_export (--opencode-export) completes an OpenCode event log; agent is codex" in message
    config = tmp_path / "replay.toml"
    config.write_text('[replay]\nagent = "opencode"\ntrajectory = "run.jsonl"\nafter_step = 1\n'
                      'opencode_export = "ses.json"\n')
    assert load_toml(config).opencode_export == tmp_path / "ses.json"  # relative to the config file


def test_a_missing_opencode_export_is_a_configuration_error(tmp_path: Path) -> None:
    from forkpoint.run.engine import execute

    fixture = Path(__file__).parents[1] / "fixtures" / "opencode" / "1.18.33" / "run_log"
    result = execute(build_request({"agent": "opencode", "trajectory": str(fixture / "events.jsonl"), "after_step": 1,
                                    "replay_only": True, "workspace": str(tmp_path),
                                    "opencode_export": str(tmp_path / "absent.json"),
                                    "output_dir": str(tmp_path / "out"), "state_dir": str(tmp_path / "state")},
                                   source="test"))
    assert result.failure is not None and result.exit_code == 2 and "absent.json" in result.failure.message


def test_env_entries_from_toml_and_json(tmp_path: Path) -> None:
    config = tmp_path / "replay.toml"
    config.write_text('[replay]\nagent = "claude-code"\ntrajectory = "t.jsonl"\nafter_step = 1\n'
                      'env = ["FOO_CANARY", "BAR=1"]\n')
    assert load_toml(config).env == ["FOO_CANARY", "BAR=1"]
    request = tmp_path / "request.json"
    request.write_text(json.dumps({"schema_version": REQUEST_SCHEMA, **BASE, "env": ["X=a=b"]}))
    assert load_json_request(request).env == ["X=a=b"]
    assert "env: input should be a valid list" in str(_refusal({**BASE, "env": "FOO"}))
    assert "env.0: input should be a valid string" in str(_refusal({**BASE, "env": [1]}))
    assert "BAD-NAME" in str(_refusal({**BASE, "env": ["BAD-NAME=1"]}))


# -- model choice and sampling pins (issue 17) ------------------------------------------------------------------------


def test_model_and_pins_fill_the_continue_settings() -> None:
    import sys

    from forkpoint.adapters import agent_spec
    from forkpoint.bridge.translate.sampling import SamplingPins
    from forkpoint.core.model import LaunchTarget
    from forkpoint.run.request import continue_settings

    request = build_request({**BASE, "agent": "pi", "model": "other-model", "temperature": 0, "seed": 7,
                             "top_p": 1, "max_output_tokens": 64, "disable_thinking": True,
                             "reasoning_effort": "low", "upstream_retries": 5}, source="t")
    assert request.temperature == 0.0 and isinstance(request.temperature, float)
    from forkpoint.core.model import Plan, Trajectory

    plan = Plan(Trajectory("pi", "1", frozenset({"1"}), None, None, Path("t"), "0", (), (None,), native=None), 0,
                Mode.REPLAY_AND_CONTINUE, "pi/1")
    settings = continue_settings(request, agent_spec("pi"), LaunchTarget(Path(sys.executable), "1"), plan)
    assert settings.model == "other-model" and settings.upstream_retries == 5
    assert settings.sampling == SamplingPins(temperature=0.0, top_p=1.0, seed=7, max_output_tokens=64,
                                             disable_thinking=True, reasoning_effort="low")
    plain = continue_settings(build_request({**BASE, "agent": "pi"}, source="t"), agent_spec("pi"),
                              LaunchTarget(Path(sys.executable), "1"), plan)
    assert (plain.model, plain.sampling, plain.upstream_retries) == (None, None, 3)
    assert (plain.upstream_idle_timeout_s, plain.answer_timeout_s, plain.timeout_s) == (300.0, 1800.0, 14400.0)
    timed = continue_settings(build_request({**BASE, "agent": "pi", "upstream_idle_timeout": 2, "answer_timeout": 3.5,
                                             "continuation_timeout": 60}, source="t"), agent_spec("pi"),
                              LaunchTarget(Path(sys.executable), "1"), plan)
    assert (timed.upstream_idle_timeout_s, timed.answer_timeout_s, timed.timeout_s) == (2.0, 3.5, 60.0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"seed": 7}, "the Anthropic Messages API has no seed (the requests leaving the bridge speak "
                      "anthropic-messages)"),
        ({"reasoning_effort": "low"}, "--reasoning-effort is for the Responses and Chat APIs"),
        ({"agent": "codex", "seed": 1}, "the Responses API has no seed"),
        ({"agent": "codex", "disable_thinking": True}, "the Responses API turns reasoning down with "
                                                       "--reasoning-effort"),
        ({"agent": "codex", "reasoning_effort": "huge"}, "reasoning_effort must be one of minimal, low, medium, "
                                                         "high, none, not 'huge'"),
        ({"temperature": 3.0}, "temperature must be within [0, 2]"),
        ({"top_p": -0.1}, "top_p must be within [0, 1]"),
        ({"max_output_tokens": 0}, "max_output_tokens must be at least 1"),
        ({"model": " "}, "model must not be empty"),
        ({"upstream_retries": -1}, "upstream_retries must be 0 or more"),
        ({"answer_timeout": 0}, "answer_timeout must be a number of seconds above 0"),
        ({"upstream_idle_timeout": -1}, "upstream_idle_timeout must be a number of seconds above 0"),
        ({"continuation_timeout": 8 * 24 * 3600}, "continuation_timeout must be a number of seconds above 0 and at "
                                                  "most 604800"),
        ({"answer_timeout": "1"}, "answer_timeout: input should be a valid number"),
        ({"temperature": "0"}, "temperature: input should be a valid number"),
        ({"temperature": True}, "temperature: input should be a valid number"),
        ({"branches": 2, "branch_seeds": [1, 2, 3]}, "give one branch_seeds value for all branches or one per "
                                                      "branch (2), not 3"),
        ({"branch_models": ["m"]}, "branch_models varies the branches of --branches K (K of 2 or more); for one "
                                   "continuation use model"),
        ({"branches": 2, "branch_temperatures": [0.5, 9]}, "temperature must be within [0, 2]"),
        ({"agent": "pi", "branches": 2, "branch_seeds": ["1"]}, "branch_seeds.0: input should be a valid integer"),
    ],
)
def test_model_choice_refusals(change: dict[str, object], message: str) -> None:
    assert message in _refusal({**BASE, **change}).message


def test_pins_the_protocol_carries_are_accepted() -> None:
    assert build_request({**BASE, "agent": "codex", "reasoning_effort": "low", "model": "gpt-other"},
                         source="t").reasoning_effort == "low"
    assert build_request({**BASE, "disable_thinking": True, "temperature": 0}, source="t").disable_thinking
    request = build_request({**BASE, "agent": "pi", "branches": 2, "branch_seeds": [1, 2],
                             "branch_temperatures": [1], "branch_models": ["a", "b"]}, source="t")
    assert request.branch_temperatures == [1.0]


def test_max_processes_defaults_to_512_and_is_a_strict_positive_key() -> None:
    assert build_request(dict(BASE), source="t").max_processes == 512
    assert build_request({**BASE, "max_processes": 64}, source="t").max_processes == 64
    assert "max_processes must be positive" in _refusal({**BASE, "max_processes": 0}).message
    assert "max_processes: input should be a valid integer" in _refusal({**BASE, "max_processes": "64"}).message


def test_http_mcp_servers_cannot_reach_a_continued_claude_under_bwrap(tmp_path: Path) -> None:
    """The continued claude is given the --mcp-config servers; under bwrap its network is the bridge only, so an HTTP
    server is refused before anything runs, with the way out (stdio servers and replay-only still work)."""
    pytest.importorskip("mcp")
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"web": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
                                                 "tiny": {"command": "python3"}}}))
    values = {**BASE, "mcp_config": str(config), "sandbox": "bwrap"}
    assert "HTTP server(s) web cannot be reached" in _refusal(values).message
    assert build_request({**values, "replay_only": True}, source="t").mcp_config == config
    assert build_request({**values, "sandbox": "local"}, source="t").mcp_config == config
