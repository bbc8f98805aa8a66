"""The rebuilt Copilot CLI event log: cut at the boundary, fresh observations where the CLI reads them."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.adapters.copilot_cli import CopilotCliAdapter
from forkpoint.adapters.copilot_cli.parse import parse_copilot
from forkpoint.core.model import FreshObservation, Mode, Plan

FIXTURE = Path(__file__).parents[2] / "fixtures" / "copilot_cli" / "1.0.102" / "tools"


def plan(after: int) -> Plan:
    parsed = parse_copilot(FIXTURE / "session.jsonl")
    return Plan(parsed, after, Mode.PREPARE_ONLY, CopilotCliAdapter().profile_for(parsed))


def test_the_prepared_prefix_is_the_recorded_log_cut_after_the_batch(tmp_path: Path) -> None:
    prefix = CopilotCliAdapter().write_prepared_prefix(plan(3), tmp_path)
    recorded = (FIXTURE / "session.jsonl").read_text().splitlines()
    written = prefix.path.read_text().splitlines()
    assert [json.loads(line) for line in written] == [json.loads(line) for line in recorded[: len(written)]]
    last = json.loads(written[-1])
    assert last["type"] == "tool.execution_complete" and last["data"]["result"]["content"].startswith("File ")
    assert prefix.session_id == parse_copilot(FIXTURE / "session.jsonl").session_id


def test_fresh_observations_replace_the_results_a_resume_reads(tmp_path: Path) -> None:
    cut = plan(6)
    fresh = {c.call_id: FreshObservation(c.call_id, f"fresh {c.name}", is_error=c.name == "create") for c in cut.calls}
    prefix = CopilotCliAdapter().write_rebuilt_prefix(cut, fresh, tmp_path)
    events = [json.loads(line) for line in prefix.path.read_text().splitlines()]
    completions = [e["data"] for e in events if e["type"] == "tool.execution_complete"]
    assert len(completions) == 10 and "helo" not in prefix.path.read_text().split("tool.execution_complete")[-1]
    for data in completions:
        if data["success"]:
            assert data["result"] == {"content": f"fresh {fresh[data['toolCallId']].content.split()[1]}"}
            assert "error" not in data
        else:
            assert data["error"] == {"message": "fresh create", "code": "failure"} and "result" not in data
    re_read = parse_copilot(prefix.path)
    assert re_read.complete_count == 6
    assert {c.historical.content for b in re_read.batches for c in b.calls if c.historical} == {
        f"fresh {n}" for n in ("bash", "view", "edit", "create", "grep", "glob")}
