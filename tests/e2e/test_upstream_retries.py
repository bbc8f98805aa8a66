"""End to end with the REAL claude (2.1.332) and codex (0.171.0): upstream failures before the first byte reached
the agent are retried by the bridge, a failure after it fails the run as retryable (exit 40).

ScriptedModel plays the model (the only stand-in), its faults declared in script.json (see
forkpoint.testing.scripted_model). The bridge's policy is the run's: ``--upstream-retries`` (default 3) with the
default backoff; the scripted 429 asks for Retry-After 0, so the whole file waits under ~2 s for backoff.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.core.results import ReplayResult
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import replay_recording

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures"
AFTER = 1  # the continued agent's first request is answered by turn 1 of the script


@dataclass(frozen=True)
class Agent:
    """A recording whose continuation meets the scripted faults, and the native upstream it speaks."""

    name: str
    version: str
    fixture: Path
    trajectory: str
    upstream: str
    url_suffix: str
    key_env: str


AGENTS = {
    "claude": Agent("claude-code", "2.1.332", FIXTURES / "claude_code" / "2.1.332" / "single_bash", "session.jsonl",
                    "anthropic", "", "ANTHROPIC_API_KEY"),
    "codex": Agent("codex", "0.171.0", FIXTURES / "codex" / "0.171.0" / "exec_basic", "rollout.jsonl",
                   "openai-responses", "/v1", "OPENAI_API_KEY"),
}


@pytest.fixture(params=sorted(AGENTS))
def agent(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Agent:
    chosen = AGENTS[request.param]
    if runtimes.find(chosen.name, chosen.version) is None:
        pytest.skip(f"{chosen.name} {chosen.version} is not installed "
                    f"(forkpoint agents install {chosen.name}@{chosen.version})")
    monkeypatch.setenv(chosen.key_env, "scripted-upstream-key")
    return chosen


def scripted(tmp_path: Path, agent: Agent, faults: list[dict[str, Any]]) -> ScriptedModel:
    """The fixture's script with ``faults`` on the turn that answers the continued agent's first request, written
    as script.json and loaded from it (the faults' JSON form is what is under test)."""
    script = json.loads((agent.fixture / "script.json").read_text())
    script["turns"][AFTER]["faults"] = faults
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return ScriptedModel.from_file(path)


def run(tmp_path: Path, agent: Agent, model: ScriptedModel,
        **overrides: Any) -> tuple[ReplayResult, list[dict[str, Any]]]:
    with model.serve() as url:
        result = replay_recording(agent.fixture, tmp_path, agent=agent.name, trajectory=agent.trajectory,
                                  after=AFTER, upstream=agent.upstream, upstream_url=url + agent.url_suffix,
                                  **overrides)
    log = tmp_path / "state" / f"run-{AFTER}" / "bridge-log.jsonl"
    return result, [json.loads(line) for line in log.read_text().splitlines()]


def test_429_503_and_a_dropped_connection_are_retried_and_the_run_continues(tmp_path: Path, agent: Agent) -> None:
    faults: list[dict[str, Any]] = [{"status": 429, "headers": {"Retry-After": "0"}}, {"status": 503},
                                    {"drop": "before_first_byte"}]
    result, log = run(tmp_path, agent, scripted(tmp_path, agent, faults))
    assert result.failure is None, result.failure
    assert (result.phase, result.agent_status) == ("continued", "completed")
    assert result.metadata["upstream_retries"] == 3
    first = next(record for record in log if record["verdict"] == "ok")
    attempts = first["facts"]["upstream_attempts"]
    assert [(a["attempt"], a.get("status"), a.get("error"), a.get("retry")) for a in attempts] == [
        (1, 429, None, True), (2, 503, None, True), (3, None, "ServerDisconnectedError", True), (4, 200, None, None)]
    assert attempts[0]["wait_s"] == 0 and "Retry-After 0s" in attempts[0]["reason"]
    assert (first["status"], first["forwarded"]) == (200, True)
    bridge = result.metadata["model_bridge"]
    assert bridge["refused"] == 0 and bridge["forwarded"] == bridge["validated"]
    next_action = json.loads((Path(result.output_dir or "") / "next-action.json").read_text())
    assert next_action["metrics"]["same_tool_calls"] is True, next_action
    assert "scripted-upstream-key" not in "".join(json.dumps(record) for record in log)


def test_a_drop_after_the_first_byte_is_not_retried_and_fails_the_run_as_retryable(tmp_path: Path,
                                                                                   agent: Agent) -> None:
    """The agent saw part of an answer: the bridge cuts its connection too and the run fails with exit 40,
    retryable (claude retries on its own; its session keeps the broken turn: the run is not a clean one)."""
    model = scripted(tmp_path, agent, [{"drop": "after_first_byte"}])
    result, log = run(tmp_path, agent, model)
    assert result.failure is not None and result.phase != "continued"
    assert (result.exit_code, result.failure.category, result.failure.retryable) == (
        40, "model_connection_error", True), result.failure
    assert "broke after its first byte reached the agent" in result.failure.message
    assert model.requests[0]["fault"] == "drop after_first_byte"
    broken = next(record for record in log if record["verdict"] == "ok")
    assert broken["reason"].startswith("upstream stream broke") and "upstream_attempts" not in broken["facts"]
