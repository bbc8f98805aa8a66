"""Prepare-only on REAL Codex rollouts (recorded by the real binaries; see tests/fixtures/codex)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from forkpoint.adapters.codex.parse import parse_rollout
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request

FIXTURES = Path(__file__).parents[2] / "fixtures" / "codex"
ROLLOUTS = sorted(FIXTURES.glob("0.*/*/rollout.jsonl"))
EXPECTED = {
    "exec_basic": [["exec_command"], ["exec_command"]],
    "parallel": [["exec_command", "exec_command"]],
    "apply_patch": [["apply_patch"], ["exec_command"]],
    "error_exit": [["exec_command"]],
    "update_plan": [["update_plan"]],
    "unified_exec": [["exec_command"], ["write_stdin"], ["exec_command"], ["write_stdin"], ["write_stdin"],
                     ["write_stdin"], ["write_stdin"], ["exec_command"], ["write_stdin"], ["write_stdin"],
                     ["exec_command"], ["write_stdin"]],
    # 0.40 writes each call of a parallel response followed by its output: one batch per call
    "shell_040": [["shell"]] * 16 + [["update_plan"]],
    "view_image_040": [["view_image"]] * 6,
    "view_image": [["view_image"]] * 6,
    "truncation_0138": [["exec_command"]] * 3,
    "truncation_096": [["exec_command"]],
}


def _id(path: Path) -> str:
    return f"{path.parent.parent.name}-{path.parent.name}"


def test_both_verified_versions_have_fixtures() -> None:
    assert {"0.149.0", "0.171.0"} <= {p.parent.parent.name for p in ROLLOUTS}


@pytest.mark.parametrize("rollout", ROLLOUTS, ids=_id)
def test_real_rollout_batches(rollout: Path) -> None:
    parsed = parse_rollout(rollout)
    assert parsed.version == rollout.parent.parent.name
    assert [[c.name for c in b.calls] for b in parsed.batches] == EXPECTED[rollout.parent.name]
    assert parsed.complete_count == len(parsed.batches) and not parsed.incomplete_tail
    meta = orjson.loads(rollout.read_bytes().split(b"\n", 1)[0])["payload"]
    assert parsed.session_id == meta["id"]
    assert all(call.historical is not None for batch in parsed.batches for call in batch.calls)


@pytest.mark.parametrize("rollout", ROLLOUTS, ids=_id)
def test_prepare_only_at_every_boundary(rollout: Path, tmp_path: Path) -> None:
    source = rollout.read_bytes()
    source_lines = source.split(b"\n")
    parsed = parse_rollout(rollout)
    for after in range(1, parsed.complete_count + 1):
        result = execute(build_request(
            {"agent": "codex", "trajectory": str(rollout), "after_step": after, "prepare_only": True,
             "workspace": str(tmp_path), "state_dir": str(tmp_path / "state"), "output_dir": str(tmp_path / "out"),
             "run_id": f"r{after}"}, source="test"))
        assert result.failure is None, result.failure
        prefix = next((tmp_path / "out" / f"r{after}" / "native" / "prefix").glob("rollout-*.jsonl"))
        lines = prefix.read_bytes().splitlines()
        assert lines == source_lines[: len(lines)]  # a byte-identical head of the rollout
        records = [orjson.loads(line) for line in lines]
        assert records[0]["type"] == "session_meta"
        last = records[-1]["payload"]
        if last["type"] == "message":  # Codex 0.40's view_image: its image message ends the batch
            assert last["role"] == "user" and rollout.parent.name == "view_image_040"
            last = records[-2]["payload"]
        assert last["type"] in ("function_call_output", "custom_tool_call_output")
        assert last["call_id"] in {c.call_id for c in parsed.batches[after - 1].calls}
        outputs = {r["payload"]["call_id"] for r in records
                   if r["type"] == "response_item" and r["payload"]["type"].endswith("_output")}
        assert outputs == {c.call_id for b in parsed.batches[:after] for c in b.calls}
    assert rollout.read_bytes() == source
