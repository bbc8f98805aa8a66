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
    ("openhands-sdk", "openhands-sdk", "*/*/conversation/base_state.json"),
])
def test_recorded_fixtures_are_detected(folder: str, agent: str, pattern: str) -> None:
    """Every recorded scenario of every verified version (both Pi formats, both mini-swe-agent schemas)."""
    files = sorted((FIXTURES / folder).glob(pattern))
    assert files, pattern
    assert {guess_agent(path) for path in files} == {agent}


def _padded(document: Any, tmp_path: Path, name: str) -> Path:
    """The document with a 1 MiB message (escapes and non-ASCII included) in front: far past the 256 KiB head."""
    pad = {"role": "user", "content": "\\\"é\u2028" * 200_000}
    document["messages"].insert(0, pad) if isinstance(document, dict) else None
    path = tmp_path / name
    path.write_bytes(__import__("orjson").dumps(document))
    assert path.stat().st_size > 4 * 256 * 1024
    return path


@pytest.mark.parametrize(("fixture", "agent"), [
    ("mini_swe_agent/1.17.5/basic/trajectory.traj.json", "mini-swe-agent"),
    ("mini_swe_agent/2.4.6/basic/trajectory.traj.json", "mini-swe-agent"),
])
def test_a_single_json_document_larger_than_the_head_is_detected(fixture: str, agent: str, tmp_path: Path) -> None:
    """Issue 28 item 7: real exports exceed 256 KiB; the outline is streamed, bounded, and names the agent."""
    import orjson

    path = _padded(orjson.loads((FIXTURES / fixture).read_bytes()), tmp_path, "big.json")
    assert guess_agent(path) == agent


def test_a_large_opencode_export_is_detected(tmp_path: Path) -> None:
    import orjson

    export = next((FIXTURES / "opencode" / "1.18.33").glob("*/export.json"))
    document = orjson.loads(export.read_bytes())
    document["messages"].insert(0, {"info": {"id": "msg_pad"}, "parts": [{"type": "text", "text": "x" * 600_000}]})
    path = tmp_path / "export.json"
    path.write_bytes(orjson.dumps(document))
    assert guess_agent(path) == "opencode"


def test_the_outline_is_bounded(tmp_path: Path) -> None:
    """A document that never ends within the bound, or is not JSON, gives no guess (and reads at most the bound)."""
    path = tmp_path / "endless.json"
    path.write_bytes(b'{"messages": [' + b'[1],' * 200_000)
    assert guess_agent(path, max_bytes=400_000) is None
    path.write_bytes(b'{"trajectory_format": "mini-swe-agent-1", "x": "' + b"y" * 600_000 + b'"}')
    assert guess_agent(path) == "mini-swe-agent"
    assert guess_agent(path, max_bytes=300_000) is None  # past the bound: not read, not guessed


@pytest.mark.parametrize(("first", "agent", "said"), [
    (b'{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}\n{"type":"turn.started"}\n',
     "codex", "stdout of `codex exec --json`"),
    (b'{"type":"system","subtype":"init","uuid":"u1","session_id":"s1","cwd":"/w"}\n', "claude-code",
     "stdout of `claude --output-format stream-json`"),
])
def test_agent_stdout_is_detected_and_named(first: bytes, agent: str, said: str, tmp_path: Path) -> None:
    from forkpoint.adapters import get_adapter
    from forkpoint.core.errors import ReplayError

    path = tmp_path / "stdout.jsonl"
    path.write_bytes(first)
    assert guess_agent(path) == agent
    with pytest.raises(ReplayError) as refused:
        get_adapter(agent).parse(path)
    assert said in refused.value.message and refused.value.kind.exit_code == 10
