"""End to end with sessions the Claude Agent SDK wrote (``claude-agent-sdk`` 0.2.184 driving the REAL claude 2.1.332;
scripts/record_claude_agent_sdk_fixtures.py): prepare-only, replay-only and continue, and the continued requests are
the ones the SDK run sent (system prompt and tool definitions, byte for byte), not a CLI run's.

ScriptedModel plays the model (the only stand-in).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import replay_recording

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).parents[1] / "fixtures" / "claude_code"
FIXTURES = ROOT / "2.1.332"
VERSIONS = ("2.1.220", "2.1.332")


def _require_runtime(version: str) -> None:
    if runtimes.find("claude-code", version) is None:
        pytest.skip(f"claude-code {version} is not installed (forkpoint agents install claude-code@{version})")


@pytest.fixture(autouse=True)
def _upstream_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted-upstream-key")
    yield


def _sha(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()  # as requests.jsonl hashes them


def _recorded(fixture: Path, key: str) -> set[str]:
    """The hashes of ``system`` / ``tools`` the main agent's requests had in the recording."""
    rows = [json.loads(line) for line in (fixture / "requests.jsonl").read_text().splitlines()]
    return {row["body"][f"{key}_sha256"] for row in rows if isinstance(row.get("body"), dict)
            and row["body"].get("tool_names")}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("scenario", "after", "reasons"), [
    ("sdk_query", 1, []),
    ("sdk_resume", 1, []),  # the boundary is in the first query()
    ("sdk_resume", 2, []),  # the boundary is in the second query() (resume=ID): both prompts are in the prefix
    ("sdk_fork", 2, []),  # a fork_session file: its first batch is a copy of the original session's
    ("sdk_subagents", 1, ["subagent_answer_reused"]),  # the code-defined writer's own calls re-run first
])
def test_sdk_sessions_replay_and_continue_as_the_sdk_ran_them(version: str, scenario: str, after: int,
                                                               reasons: list[str], tmp_path: Path) -> None:
    """Every observation exact, the gate passes, and the continued claude's requests carry the recorded system
    prompt and tools: the SDK's entrypoint (``sdk-py``) and its stream-json input, not a ``claude -p`` run's."""
    _require_runtime(version)
    fixture = ROOT / version / scenario
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent="claude-code", trajectory="session.jsonl", after=after,
                                  upstream="anthropic", upstream_url=url)
    assert result.failure is None, result.failure
    assert (result.phase, result.agent_status, result.quality_reasons) == ("continued", "completed", reasons)
    assert result.metadata["model_bridge"]["refused"] == 0
    assert result.metadata["sdk_entrypoint"] == "sdk-py"
    observations = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
    assert all(row["exact"] for row in observations if not row.get("reused"))
    live = [entry["body"] for entry in model.requests if isinstance(entry.get("body"), dict)
            and entry["body"].get("tools") and "writer sub-agent" not in json.dumps(entry["body"].get("system"))]
    assert live, "the continued claude sent no request"
    if version == "2.1.220":
        # 2.1.220 keeps no system prompt in the session: its resume sends its default one, and with it (measured)
        # other tool descriptions than a run with the SDK's default empty prompt (docs/adapters/claude-code.md)
        if scenario == "sdk_resume":  # made with the claude_code preset: the same tools
            assert {_sha(body["tools"]) for body in live} <= _recorded(fixture, "tools")
        return
    assert {_sha(body["tools"]) for body in live} <= _recorded(fixture, "tools")
    if scenario != "sdk_resume":  # the claude_code preset + append: the identity line differs (docs)
        assert {_sha(body["system"]) for body in live} <= _recorded(fixture, "system")


def test_a_forked_sdk_session_prepares_and_replays_from_its_own_file(tmp_path: Path) -> None:
    """``fork_session=True``: the new file holds the original's records under the new session id; prepare-only gives
    the prefix byte for byte and replay-only re-runs the copied batch and the fork's own."""
    _require_runtime("2.1.332")
    fixture = FIXTURES / "sdk_fork"
    parsed = parse_session(fixture / "session.jsonl")
    origin = parse_session(fixture / "origin.jsonl")
    assert parsed.session_id != origin.session_id and parsed.complete_count == 2 and origin.complete_count == 1
    assert parsed.batches[0].calls[0].arguments == origin.batches[0].calls[0].arguments
    prepared = replay_recording(fixture, tmp_path / "p", agent="claude-code", trajectory="session.jsonl", after=1,
                                prepare_only=True)
    assert prepared.failure is None and prepared.phase == "prepared", prepared.failure
    replayed = replay_recording(fixture, tmp_path / "r", agent="claude-code", trajectory="session.jsonl", after=2,
                                replay_only=True)
    assert replayed.failure is None and (replayed.phase, replayed.quality) == ("replayed", "verified")
    rows = json.loads((Path(replayed.output_dir or "") / "observations.json").read_text())["observations"]
    assert [row["fresh_preview"]["text"] for row in rows] == ["one", "one\nforked"]


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed")
def test_an_sdk_session_continues_under_bwrap_with_the_recorded_system_prompt(tmp_path: Path) -> None:
    """The stream-json prompt on stdin and the SDK entrypoint reach the continued claude inside the sandbox too."""
    _require_runtime("2.1.332")
    fixture = FIXTURES / "sdk_query"
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent="claude-code", trajectory="session.jsonl", after=1,
                                  upstream="anthropic", upstream_url=url, sandbox="bwrap")
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    live = [entry["body"] for entry in model.requests if isinstance(entry.get("body"), dict)
            and entry["body"].get("tools")]
    assert live and {_sha(body["system"]) for body in live} <= _recorded(fixture, "system")
