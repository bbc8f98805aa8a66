"""Parsing Gemini CLI 0.61.0 chat recordings (the real-binary fixture, and hostile variants of it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint.adapters.detect import guess_agent
from forkpoint.adapters.gemini_cli.parse import parse_gemini
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import CallPolicy

FIXTURE = Path(__file__).parents[2] / "fixtures" / "gemini_cli" / "0.61.0" / "tools"


def lines() -> list[dict[str, object]]:
    return [json.loads(line) for line in (FIXTURE / "session.jsonl").read_text().splitlines()]


def write(path: Path, records: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_the_recorded_session_has_one_batch_per_model_turn_with_calls() -> None:
    parsed = parse_gemini(FIXTURE / "session.jsonl")
    assert guess_agent(FIXTURE / "session.jsonl") == "gemini-cli"
    assert [[c.name for c in b.calls] for b in parsed.batches] == [
        ["write_file"], ["run_shell_command"], ["read_file", "list_directory"], ["replace"],
        ["glob", "grep_search"], ["read_file"]]
    assert parsed.complete_count == 6 and parsed.version is None and parsed.native.model == "gemini-2.5-pro"
    assert all(c.policy is CallPolicy.FRESH for b in parsed.batches for c in b.calls)
    missing = parsed.batches[5].calls[0].historical
    assert missing is not None and missing.is_error and "File not found" in missing.content["error"]
    assert parsed.batches[0].calls[0].historical.content["output"].startswith(  # type: ignore[union-attr]
        "Successfully created and wrote to new file:")
    # a message written twice (the answer, then with its toolCalls) is one message
    assert len(parsed.native.messages) == len({m["id"] for m in parsed.native.messages})
    assert parsed.next_actions[0] is not None and parsed.next_actions[0].tools[0][0] == "write_file"
    assert parsed.next_actions[6] is not None and "Done" in parsed.next_actions[6].text


def test_stale_and_foreign_tools_get_their_policies(tmp_path: Path) -> None:
    records = lines()
    for record in records:
        for call in record.get("toolCalls") or []:  # type: ignore[attr-defined]
            if call["name"] == "glob":
                call["name"] = "google_web_search"
            if call["name"] == "grep_search":
                call["name"] = "mcp_server__tool"
    parsed = parse_gemini(write(tmp_path / "s.jsonl", records))
    policies = {c.name: c.policy for b in parsed.batches for c in b.calls}
    assert policies["google_web_search"] is CallPolicy.STALE and policies["mcp_server__tool"] is CallPolicy.REFUSED


@pytest.mark.parametrize(("change", "message"), [
    (lambda r: r[0].update(sessionId="../../etc"), "session id"),
    (lambda r: r.append({"$rewindTo": "x"}), "rewind"),
    (lambda r: r.append({**r[0], "sessionId": "11111111-2222-3333-4444-555555555555"}), "another session"),
    (lambda r: r.append({"id": 3, "type": "user"}), "has no id"),
    (lambda r: r.__setitem__(0, {"hello": "world"}), "header"),
])
def test_hostile_records_are_refused(tmp_path: Path, change: object, message: str) -> None:
    records = lines()
    change(records)  # type: ignore[operator]
    with pytest.raises(ReplayError) as caught:
        parse_gemini(write(tmp_path / "s.jsonl", records))
    assert caught.value.kind is ErrorKind.TRAJECTORY and message in caught.value.message


def test_a_resumed_session_file_repeats_its_header_and_rewrites_its_list(tmp_path: Path) -> None:
    """What the CLI writes on --session-file: a header again, ``$set.messages`` repeating ids (measured)."""
    records = lines()
    messages = [r for r in records if "type" in r]
    rewritten = [*messages[:3], {**messages[2], "type": "user"}]
    extra: list[dict[str, object]] = [{**records[0]}, {"$set": {"messages": rewritten}},
                                      {"id": "new", "timestamp": "t", "type": "user", "content": [{"text": "go"}]}]
    parsed = parse_gemini(write(tmp_path / "s.jsonl", records + extra))
    ids = [m["id"] for m in parsed.native.messages]
    assert ids == [*(m["id"] for m in messages[:3]), messages[2]["id"], "new"]


def _with_context(records: list[dict[str, object]], old: str, new: str) -> list[dict[str, object]]:
    return [json.loads(json.dumps(record).replace(old, new)) for record in records]


def test_the_recorded_cwd_is_the_listed_workspace_directory_with_the_project_hash(tmp_path: Path) -> None:
    """``projectHash`` is the SHA-256 of the project root: the listed workspace directory that has it is the cwd
    (what --sandbox bwrap mounts the workspace at); a context naming another directory is not believed."""
    assert parse_gemini(FIXTURE / "session.jsonl").cwd == "/tmp/forkpoint-rec-gemini/tools"
    # a context that lists another directory (or the right one spelled differently) gives no cwd
    for spelled in ("/etc", "/tmp/forkpoint-rec-gemini/tools/", "/tmp/forkpoint-rec-gemini/./tools",
                    "tmp/forkpoint-rec-gemini/tools"):
        records = _with_context(lines(), "  - /tmp/forkpoint-rec-gemini/tools\\n", f"  - {spelled}\\n")
        assert parse_gemini(write(tmp_path / "s.jsonl", records)).cwd is None, spelled
    records = lines()
    records[0] = {**records[0], "projectHash": "0" * 64}
    assert parse_gemini(write(tmp_path / "s.jsonl", records)).cwd is None
