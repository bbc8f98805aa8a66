"""Qwen Code 0.24.4 recordings parse into batches (real fixture), and hostile records are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint.adapters.detect import guess_agent
from forkpoint.adapters.qwen_code.parse import parse_qwen
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import CallPolicy

FIXTURE = Path(__file__).parents[2] / "fixtures" / "qwen_code" / "0.24.4" / "tools" / "session.jsonl"


def _records() -> list[dict[str, object]]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def _write(tmp_path: Path, records: list[dict[str, object]]) -> Path:
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_the_real_recording_parses_into_its_six_batches() -> None:
    parsed = parse_qwen(FIXTURE)
    assert parsed.version == "0.24.4" and parsed.cwd == "/tmp/forkpoint-rec-qwen/tools"
    assert [[c.name for c in b.calls] for b in parsed.batches] == [
        ["write_file"], ["run_shell_command"], ["read_file", "glob"], ["edit"], ["grep_search"], ["read_file"]]
    assert all(c.policy is CallPolicy.FRESH for b in parsed.batches for c in b.calls)
    last = parsed.batches[-1].calls[0].historical
    assert last is not None and last.is_error and "File not found" in last.content["error"]
    assert guess_agent(FIXTURE) == "qwen-code"


@pytest.mark.parametrize("session_id", ["../../etc/passwd", "a/b", "x" * 300, ""])
def test_a_session_id_that_is_not_a_uuid_is_refused(tmp_path: Path, session_id: str) -> None:
    records = _records()
    for record in records:
        record["sessionId"] = session_id
    with pytest.raises(ReplayError, match="session id"):
        parse_qwen(_write(tmp_path, records))


def test_a_branched_chain_is_refused(tmp_path: Path) -> None:
    records = _records()
    records[5]["parentUuid"] = records[1]["uuid"]
    with pytest.raises(ReplayError, match="linear"):
        parse_qwen(_write(tmp_path, records))


def test_an_unknown_tool_is_refused_and_a_network_tool_is_stale(tmp_path: Path) -> None:
    records = _records()
    calls = [p for r in records if r["type"] == "assistant" for p in r["message"]["parts"]  # type: ignore[index]
             if "functionCall" in p]
    calls[0]["functionCall"]["name"] = "mcp__evil__run"
    calls[1]["functionCall"]["name"] = "web_fetch"
    parsed = parse_qwen(_write(tmp_path, records))
    assert parsed.batches[0].calls[0].policy is CallPolicy.REFUSED
    assert parsed.batches[1].calls[0].policy is CallPolicy.STALE
