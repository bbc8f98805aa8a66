"""The recorded Claude Code fixtures are complete and consistent (see tests/fixtures/claude_code/README.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "claude_code"
CASES = sorted(p.parent for p in FIXTURES.glob("*/*/meta.json"))


def test_every_version_and_scenario_recorded() -> None:
    versions = {case.parent.name for case in CASES}
    # 1.0.128 and 2.0.27: old lines, 2.1.108: the 2.1.94-2.1.126 profile, each recorded for its tool profile
    # (scenarios with ``only`` naming them)
    assert versions == {"2.1.220", "2.1.332", "2.0.27", "1.0.128", "2.1.108"}
    assert {case.name for case in CASES if case.parent.name == "2.1.108"} == {"no_context_note"}
    verified = [case for case in CASES if case.parent.name not in ("2.0.27", "1.0.128", "2.1.108")]
    scenarios = {case.name for case in verified}
    assert {"single_bash", "parallel", "file_tools", "error_result", "stale_tools", "dangling", "cd_persist",
            "large_output", "read_media", "cd_continue"} <= scenarios
    assert len(verified) == 2 * len(scenarios)
    for old in ("2.0.27", "1.0.128"):
        assert {case.name for case in CASES if case.parent.name == old} == {"old_line", "read_outside", "error_result"}


@pytest.mark.parametrize("case", CASES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_consistent(case: Path) -> None:
    meta = json.loads((case / "meta.json").read_text())
    lines: list[dict[str, Any]] = [json.loads(line) for line in (case / "session.jsonl").read_text().splitlines()]
    assert meta["version"] == case.parent.name == meta["probed_version"] and meta["scenario"] == case.name
    assert (case / "workspace-initial").is_dir() and (case / "script.json").is_file()
    chain = [line for line in lines if "uuid" in line]
    assert {line["version"] for line in chain if line["type"] in ("user", "assistant")} == {meta["version"]}
    assert {line["sessionId"] for line in chain} == {meta["session_id"]}
    uses = {b["id"] for line in chain if line["type"] == "assistant" for b in line["message"]["content"]
            if b["type"] == "tool_use"}
    results = {b["tool_use_id"] for line in chain if line["type"] == "user"
               and isinstance(line["message"]["content"], list) for b in line["message"]["content"]
               if b.get("type") == "tool_result"}
    expected = {tool_id for step in meta["expected_tool_ids"] for tool_id in step}
    assert uses == expected
    dangling = set(meta["expected_tool_ids"][1]) if case.name == "dangling" else set()
    assert results == expected - dangling
    assert (case / "tool-results").is_dir() == (case.name == "large_output")
