"""End to end with the REAL claude: a continued Claude Code starts a sub-agent live, through the bridge.

The sub-agent's requests are a new conversation (its own system prompt, the parent's Agent prompt as its first user
text, no rebuilt prefix, no nonce): the bridge forwards them only because the answer it forwarded to the parent
called Agent with that prompt (``bridge.subagents``). ScriptedModel scripts the parent and (keyed by its first user
text) the sub-agent.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import recorded_cwd, replay_recording

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures" / "claude_code"
PROMPT = "Write the word delegated into sub.txt with one Bash command, then report."


#: the sub-agent's system prompt says so (the parent's does not): how ScriptedModel tells their requests apart
SUBAGENT_SYSTEM = "You are an agent for Claude Code"


@pytest.fixture()
def upstream_key(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted-upstream-key")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-chat-key")
    yield


@pytest.mark.parametrize(("version", "upstream"), [("2.1.220", "anthropic"), ("2.1.332", "anthropic"),
                                                   ("2.1.332", "openai-chat")])
def test_a_continued_claude_runs_a_sub_agent_live(version: str, upstream: str, tmp_path: Path,
                                                   upstream_key: None) -> None:
    """Pass-through, and translated to Chat Completions (the bridge reads the translated answer it streams)."""
    if runtimes.find("claude-code", version) is None:
        pytest.skip(f"claude-code {version} is not installed")
    fixture = FIXTURES / version / "single_bash"
    recorded = json.loads((fixture / "script.json").read_text())["turns"]
    parent = [recorded[0],
              {"content": [{"type": "tool_use", "name": "Agent", "input": {
                  "description": "Write sub.txt", "subagent_type": "general-purpose", "prompt": PROMPT}}]},
              {"content": [{"type": "text", "text": "The sub-agent wrote sub.txt."}]}]
    child: list[dict[str, Any]] = [{"content": [{"type": "tool_use", "name": "Bash", "input": {
                 "command": "echo delegated > sub.txt", "description": "Write sub.txt"}}]},
             {"content": [{"type": "text", "text": "SUBAGENT-REPORT: sub.txt written."}]}]
    model = ScriptedModel(parent, seed=f"livesub/{version}", keyed={SUBAGENT_SYSTEM: child})
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent="claude-code", trajectory="session.jsonl", after=1,
                                  upstream=upstream, upstream_url=url if upstream == "anthropic" else f"{url}/v1")
    assert result.failure is None, result.failure
    bridge = result.metadata["model_bridge"]
    assert bridge["refused"] == 0 and bridge["subagent"] == 2, bridge
    # the sub-agent's Bash ran in the continued workspace
    assert (recorded_cwd(fixture) / "sub.txt").read_text() == "delegated\n"
    # the parent received the sub-agent's answer in its Agent tool result
    bodies = [json.dumps(e["body"]) for e in model.requests if e.get("kind") == "main"]
    parent_bodies = [body for body in bodies if SUBAGENT_SYSTEM not in body]
    assert sum(SUBAGENT_SYSTEM in body and PROMPT in body for body in bodies) == 2
    assert "SUBAGENT-REPORT" in parent_bodies[-1]
    log_path = next((tmp_path / "state").rglob("bridge-log.jsonl"))
    log = [json.loads(line) for line in log_path.read_text().splitlines()]
    assert [r["verdict"] for r in log if r["verdict"] in ("ok", "subagent")].count("subagent") == 2
    opened = [r for r in log if r["verdict"] == "subagent"]
    assert opened[0]["facts"]["subagent_opened"] is True and opened[0]["forwarded"]
