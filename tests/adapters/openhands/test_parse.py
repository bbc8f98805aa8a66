"""Parsing real OpenHands 0.62.0 V0 trajectories (recorded fixtures) and hand-made edge cases."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.openhands import OpenHandsAdapter
from forkpoint.adapters.openhands.parse import parse_events, recorded_workspace
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import CallPolicy

FIXTURES = Path(__file__).parents[2] / "fixtures" / "openhands" / "0.62.0"


def events(scenario: str) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads((FIXTURES / scenario / "trajectory.json").read_text())
    return data


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "t.json"
    path.write_text(json.dumps(data))
    return path


def test_basic_fixture() -> None:
    parsed = parse_events(FIXTURES / "basic" / "trajectory.json")
    assert parsed.version == "0.62.0"
    assert OpenHandsAdapter().profile_for(parsed) == "openhands/0.62.0/v0-events-replay-manager"
    assert parsed.cwd == "/tmp/forkpoint-rec-openhands/basic"
    assert parsed.complete_count == 4 and len(parsed.batches) == 4
    names = [[c.name for c in b.calls] for b in parsed.batches]
    assert names == [["execute_bash"], ["str_replace_editor"], ["str_replace_editor"], ["execute_bash"]]
    first = parsed.batches[0].calls[0]
    assert first.historical is not None
    assert first.historical.content == ("created\n\n[Current working directory: /tmp/forkpoint-rec-openhands/basic]\n"
                                        "[Command finished with exit code 0]")
    assert first.arguments["security_risk"] == "LOW"
    assert all(c.policy is CallPolicy.FRESH for b in parsed.batches for c in b.calls)
    assert parsed.next_actions[0] is not None and parsed.next_actions[0].text == "I'll create the package first."
    assert parsed.next_actions[4] is not None and parsed.next_actions[4].tools[0][0] == "finish"


def test_parallel_calls_of_one_response_are_one_batch() -> None:
    parsed = parse_events(FIXTURES / "parallel" / "trajectory.json")
    assert [len(b.calls) for b in parsed.batches] == [2, 1, 1, 2]
    think = parsed.batches[2].calls[0]
    assert think.name == "think" and think.historical is not None
    assert think.historical.content == "Your thought has been logged."


def test_the_recorded_requests_show_what_the_parser_calls_the_historical_observation() -> None:
    """The historical observation text is exactly the tool message the real OpenHands sent the model."""
    for scenario in ("basic", "parallel", "errors"):
        parsed = parse_events(FIXTURES / scenario / "trajectory.json")
        requests = [json.loads(line) for line in (FIXTURES / scenario / "requests.jsonl").read_text().splitlines()]
        sent = {m["tool_call_id"]: m["content"][0]["text"] for m in requests[-1]["body"]["messages"]
                if m["role"] == "tool"}
        for batch in parsed.batches:
            for call in batch.calls:
                assert call.historical is not None
                assert sent[call.call_id] == call.historical.content, (scenario, call.call_id)


@pytest.mark.parametrize(("data", "message"), [
    ({}, "JSON array"),
    ([], "empty event array"),
    ([1], "not an object"),
    ([{"id": "1", "action": "message"}], "no integer id"),
    ([{"id": 1, "action": "message"}, {"id": 1, "action": "run"}], "duplicate OpenHands event id 1"),
    ([{"id": 1}], "neither an action nor an observation"),
])
def test_malformed_trajectories(tmp_path: Path, data: Any, message: str) -> None:
    with pytest.raises(ReplayError, match=message) as caught:
        parse_events(write(tmp_path, data))
    assert caught.value.kind is ErrorKind.TRAJECTORY


def test_two_observations_for_one_action_are_refused(tmp_path: Path) -> None:
    data = events("basic")
    duplicate = copy.deepcopy(next(e for e in data if e.get("cause") == 5))
    duplicate["id"] = 99
    data.append(duplicate)
    with pytest.raises(ReplayError, match="more than one observation"):
        parse_events(write(tmp_path, data))


def test_missing_observation_makes_the_tail_incomplete(tmp_path: Path) -> None:
    data = [e for e in events("basic") if e.get("cause") != 9]
    parsed = parse_events(write(tmp_path, data))
    assert parsed.complete_count == 2 and parsed.incomplete_tail


def test_version_from_the_system_event(tmp_path: Path) -> None:
    data = events("basic")
    data[0]["args"]["openhands_version"] = "0.53.0"
    with pytest.raises(ReplayError, match=r"0\.53\.0") as caught:
        OpenHandsAdapter().profile_for(parse_events(write(tmp_path, data)))
    assert caught.value.kind is ErrorKind.UNSUPPORTED_VERSION
    without = [e for e in events("basic") if e.get("action") != "system"]
    with pytest.raises(ReplayError, match="no openhands_version"):
        OpenHandsAdapter().profile_for(parse_events(write(tmp_path, without)))


def test_unknown_and_stale_actions(tmp_path: Path) -> None:
    data = events("basic")
    run = next(e for e in data if e.get("id") == 5)
    run["action"] = "browse"
    read = next(e for e in data if e.get("id") == 7)
    read["action"] = "teleport"
    parsed = parse_events(write(tmp_path, data))
    assert parsed.batches[0].calls[0].policy is CallPolicy.STALE
    assert parsed.batches[1].calls[0].policy is CallPolicy.REFUSED
    assert "teleport" in (parsed.batches[1].calls[0].policy_reason or "")


def test_batch_count_mismatch_is_a_boundary_refusal(tmp_path: Path) -> None:
    data = events("basic")
    next(e for e in data if e.get("id") == 5)["tool_call_metadata"]["total_calls_in_response"] = 2
    parsed = parse_events(write(tmp_path, data))
    assert 1 in parsed.boundary_refusals


def test_recorded_workspace_falls_back_to_command_metadata() -> None:
    data = [e for e in events("basic") if e.get("observation") != "recall"]
    assert recorded_workspace(data) == "/tmp/forkpoint-rec-openhands/basic"
    assert recorded_workspace([{"id": 1, "action": "message"}]) is None


def test_without_a_recorded_workspace_the_default_is_derived_and_said(tmp_path: Path) -> None:
    """tests/runtime/trajs/basic.json's shape: a task and an editor call, no recall, no command: OpenHands'
    default /workspace, marked as derived; a path outside it leaves the workspace unknown (refused later)."""
    data: list[dict[str, Any]] = [
        {"id": 0, "source": "user", "message": "Create game.py.", "action": "message",
         "args": {"content": "Create game.py.", "image_urls": None, "wait_for_response": False}},
        {"id": 3, "source": "agent", "message": "", "action": "edit",
         "tool_call_metadata": {"function_name": "str_replace_editor", "tool_call_id": "toolu_1",
                                "model_response": {"id": "r1"}, "total_calls_in_response": 1},
         "args": {"path": "/workspace/game.py", "command": "create", "file_text": "x = 1\n", "thought": ""}},
        {"id": 4, "source": "agent", "message": "I edited the file /workspace/game.py.", "cause": 3,
         "observation": "edit", "tool_call_metadata": {"function_name": "str_replace_editor",
                                                       "tool_call_id": "toolu_1"},
         "content": "File created successfully at: /workspace/game.py", "extras": {"path": "/workspace/game.py"}},
    ]
    parsed = parse_events(write(tmp_path, data))
    assert parsed.cwd == "/workspace"
    assert any("derived" in warning and "/workspace" in warning for warning in parsed.warnings)
    data[1]["args"]["path"] = "/home/dev/game.py"
    outside = parse_events(write(tmp_path, data))
    assert outside.cwd is None and not outside.warnings
