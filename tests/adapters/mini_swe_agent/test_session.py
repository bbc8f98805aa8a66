"""The native prefix: historical (prepare-only) and rebuilt from fresh observation messages."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.adapters.mini_swe_agent import MiniSweAgentAdapter
from forkpoint.adapters.mini_swe_agent.parse import parse_trajectory
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import FreshObservation, Mode, Plan

FIXTURES = Path(__file__).parents[2] / "fixtures" / "mini_swe_agent"


def _plan(version: str, scenario: str, after: int, mode: Mode = Mode.PREPARE_ONLY) -> Plan:
    parsed = parse_trajectory(FIXTURES / version / scenario / "trajectory.traj.json")
    return Plan(parsed, after, mode, f"mini-swe-agent/{version}/companion-v1")


def test_prepared_prefix_cuts_after_the_boundary_observations(tmp_path: Path) -> None:
    plan = _plan("2.4.6", "parallel", 2)
    prefix = MiniSweAgentAdapter().write_prepared_prefix(plan, tmp_path)
    data = json.loads(prefix.path.read_text())
    source = json.loads(plan.trajectory.source_path.read_text())
    assert data["messages"] == source["messages"][:9]
    assert data["trajectory_format"] == "mini-swe-agent-1.1" and data["info"]["config"] == source["info"]["config"]
    assert (data["info"]["exit_status"], data["info"]["submission"], data["info"]["model_stats"]["api_calls"]) == (
        "", "", 2)
    assert prefix.sha256 == sha256_hex(prefix.path.read_bytes()) and prefix.path.name == "trajectory.traj.json"


def test_prepared_v1_prefix_keeps_format_error_turns(tmp_path: Path) -> None:
    plan = _plan("1.17.5", "format_error", 2)
    data = json.loads(MiniSweAgentAdapter().write_prepared_prefix(plan, tmp_path).path.read_text())
    source = json.loads(plan.trajectory.source_path.read_text())
    assert data["messages"] == source["messages"][:10]
    assert data["info"]["exit_status"] is None and data["info"]["model_stats"]["api_calls"] == 4


def test_rebuilt_prefix_puts_fresh_messages_in_call_order(tmp_path: Path) -> None:
    plan = _plan("2.4.6", "format_error", 2, Mode.REPLAY_ONLY)
    source = json.loads(plan.trajectory.source_path.read_text())["messages"]
    fresh = {}
    for call in plan.calls:
        message = {"role": "tool", "tool_call_id": call.call_id, "content": f"fresh {call.call_id}",
                   "extra": {"returncode": 0}}
        fresh[call.call_id] = FreshObservation(call.call_id, message["content"], native={"message": message})
    data = json.loads(MiniSweAgentAdapter().write_rebuilt_prefix(plan, fresh, tmp_path).path.read_text())
    messages = data["messages"]
    assert messages[:3] == source[:3] and messages[4:6] == source[4:6]  # system, task, turn 1; format error, turn 2
    ids = [call.call_id for call in plan.calls]
    assert [messages[3]["content"], messages[6]["content"]] == [f"fresh {ids[0]}", f"fresh {ids[1]}"]
    assert len(messages) == 7


def test_rebuilt_prefix_reuses_the_historical_message_without_fresh_native(tmp_path: Path) -> None:
    plan = _plan("1.17.5", "basic", 1, Mode.REPLAY_ONLY)
    call = plan.calls[0]
    fresh = {call.call_id: FreshObservation(call.call_id, "x", stale_reused=True)}
    data = json.loads(MiniSweAgentAdapter().write_rebuilt_prefix(plan, fresh, tmp_path).path.read_text())
    assert data["messages"] == json.loads(plan.trajectory.source_path.read_text())["messages"][:4]
