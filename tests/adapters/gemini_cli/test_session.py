"""Writing the Gemini CLI session cut after batch N (historical for prepare-only, fresh for the rebuild)."""

from __future__ import annotations

import json
from pathlib import Path

from forkpoint.adapters.gemini_cli import GeminiCliAdapter
from forkpoint.adapters.gemini_cli.parse import parse_gemini
from forkpoint.core.model import FreshObservation, Mode, Plan

FIXTURE = Path(__file__).parents[2] / "fixtures" / "gemini_cli" / "0.61.0" / "tools"


def plan(after: int) -> Plan:
    parsed = parse_gemini(FIXTURE / "session.jsonl")
    return Plan(parsed, after, Mode.PREPARE_ONLY, GeminiCliAdapter().profile_for(parsed))


def test_the_prepared_prefix_is_the_recorded_conversation_cut_and_parses_again(tmp_path: Path) -> None:
    for after in range(1, 7):
        prefix = GeminiCliAdapter().write_prepared_prefix(plan(after), tmp_path / str(after))
        reparsed = parse_gemini(prefix.path)
        assert reparsed.complete_count == after and reparsed.session_id == prefix.session_id
        assert [c.historical for b in reparsed.batches for c in b.calls] == [
            c.historical for b in plan(after).batches for c in b.calls]
        assert prefix.path.name.startswith("session-") and prefix.path.name.endswith(
            f"-{prefix.session_id[:8]}.jsonl")  # type: ignore[index]


def test_fresh_observations_replace_both_places_the_cli_reads(tmp_path: Path) -> None:
    cut = plan(3)
    fresh = {c.call_id: FreshObservation(c.call_id, {"output": f"fresh {c.name}"}) for c in cut.calls}
    prefix = GeminiCliAdapter().write_rebuilt_prefix(cut, fresh, tmp_path)
    text = prefix.path.read_text()
    assert "helo world" not in text and text.count("fresh read_file") == 2  # the call's result + the user record
    records = [json.loads(line) for line in text.splitlines()]
    calls = [c for r in records for c in r.get("toolCalls") or []]
    assert all("resultDisplay" not in c and c["status"] == "success" for c in calls)
    reparsed = parse_gemini(prefix.path)
    assert [c.historical.content for b in reparsed.batches for c in b.calls] == [  # type: ignore[union-attr]
        fresh[c.call_id].content for c in cut.calls]
