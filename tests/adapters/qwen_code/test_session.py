"""The rebuilt Qwen Code session: the recorded records up to batch N, fresh results in both places the CLI reads."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.adapters.qwen_code import QwenCodeAdapter
from forkpoint.adapters.qwen_code.parse import parse_qwen
from forkpoint.adapters.qwen_code.session import prefix_records
from forkpoint.core.model import FreshObservation, Mode, Plan

FIXTURE = Path(__file__).parents[2] / "fixtures" / "qwen_code" / "0.24.4" / "tools" / "session.jsonl"


def test_fresh_results_replace_the_recorded_ones_and_nothing_else_changes() -> None:
    trajectory = parse_qwen(FIXTURE)
    plan = Plan(trajectory, 2, Mode.PREPARE_ONLY, QwenCodeAdapter().profile_for(trajectory))
    fresh = {c.call_id: FreshObservation(c.call_id, {"error": f"fresh {c.name}"}, True) for c in plan.calls}
    records = prefix_records(plan, fresh)
    recorded = trajectory.native.records[: len(records)]
    assert records[-1]["type"] == "tool_result" and len(records) == trajectory.native.batch_end[1] + 1
    results = [r for r in records if r["type"] == "tool_result"]
    assert [r["message"]["parts"][0]["functionResponse"]["response"] for r in results] == [
        {"error": "fresh write_file"}, {"error": "fresh run_shell_command"}]
    assert all(r["toolCallResult"]["status"] == "error" and "resultDisplay" not in r["toolCallResult"]
               for r in results)
    others = [(a, b) for a, b in zip(records, recorded, strict=True) if a["type"] != "tool_result"]
    assert all(json.dumps(a) == json.dumps(b) for a, b in others)
    assert prefix_records(plan, None) == recorded
