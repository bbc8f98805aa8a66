"""Detection asks each spec's sniff in the order of the specs' detection priorities."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters import AGENT_NAMES, agent_spec, detection_order
from forkpoint.adapters.detect import guess_agent, guess_agent_from_object

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_detection_order_is_the_specs_priorities() -> None:
    order = detection_order()
    assert sorted(order) == sorted(AGENT_NAMES)  # every registered agent is asked exactly once
    priorities = [agent_spec(name).detection_priority for name in order]
    assert priorities == sorted(set(priorities))  # unique: the order never depends on the registry's order
    # the formats that share keys: codex's payload records first, an opencode export before mini-swe-agent's info
    assert order.index("codex") == 0 and order.index("opencode") < order.index("mini-swe-agent")


@pytest.mark.parametrize(("value", "agent"), [
    ({"type": "session_meta", "payload": {}}, "codex"),
    ({"timestamp": "t", "type": "response_item", "payload": {"type": "message"}}, "codex"),
    ({"type": "step_start", "sessionID": "ses_1"}, "opencode"),
    ({"info": {"id": "ses_1"}, "messages": []}, "opencode"),
    ({"type": "turn_start"}, "pi"),
    ({"type": "session", "version": 3, "cwd": "/w"}, "pi"),
    ({"uuid": "u", "parentUuid": None, "sessionId": "s"}, "claude-code"),
    ({"type": "file-history-snapshot"}, "claude-code"),
    ({"info": {"id": "x"}, "messages": []}, "mini-swe-agent"),
    ({"trajectory_format": "mini-swe-agent-1"}, "mini-swe-agent"),
    ({"trajectory": [], "history": []}, "swe-agent"),
    ([{"id": 0}], "openhands"),
    ({"something": "else"}, None),
    ("text", None),
])
def test_each_sniff_in_order(value: object, agent: str | None) -> None:
    assert guess_agent_from_object(value) == agent


def test_order_decides_between_formats_that_share_keys() -> None:
    """A Codex record carrying Claude's ids is Codex (asked first); an OpenCode export is not mini-swe-agent's."""
    both: dict[str, Any] = {"timestamp": "t", "payload": {}, "uuid": "u", "parentUuid": None}
    assert agent_spec("claude-code").sniff(both) and guess_agent_from_object(both) == "codex"
    export = {"info": {"id": "ses_1"}, "messages": []}
    assert agent_spec("mini-swe-agent").sniff(export) and guess_agent_from_object(export) == "opencode"


def test_a_codex_record_is_claimed_by_codex_alone() -> None:
    record = {"type": "session_meta", "payload": {}}
    assert [name for name in AGENT_NAMES if agent_spec(name).sniff(record)] == ["codex"]


@pytest.mark.parametrize(("folder", "agent", "pattern"), [
    ("claude_code", "claude-code", "*/*/session.jsonl"),
    ("codex", "codex", "*/*/rollout.jsonl"),
    ("opencode", "opencode", "*/*/export.json"),
    ("mini_swe_agent", "mini-swe-agent", "*/*/trajectory.traj.json"),
    ("pi", "pi", "*/*/events.jsonl"),
    ("pi", "pi", "*/*/session.jsonl"),
    ("openhands", "openhands", "*/*/trajectory.json"),
])
def test_recorded_fixtures_are_detected(folder: str, agent: str, pattern: str) -> None:
    """Every recorded scenario of every verified version (both Pi formats, both mini-swe-agent schemas)."""
    files = sorted((FIXTURES / folder).glob(pattern))
    assert files, pattern
    assert {guess_agent(path) for path in files} == {agent}
