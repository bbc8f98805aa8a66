"""Claude Code sub-agents (fixture ``subagent``, real 2.1.220 / 2.1.332 binaries): the sub-agent's own calls re-run in
order in the same workspace before the parent's Agent call, whose answer is reused (``subagent_answer_reused``);
missing transcripts are a refusal naming them; hostile transcript files are refused, never followed."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.claude_code import subagents
from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.core.model import CallPolicy
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude_code"
VERSIONS = ("2.1.220", "2.1.332")
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")


def recording(tmp_path: Path, version: str, *, with_subagents: bool = True) -> tuple[Path, str, str]:
    """The fixture laid out as Claude keeps it: ``<sid>.jsonl`` and ``<sid>/subagents/``; (session, sid, agent id)."""
    fixture = FIXTURES / version / "subagent"
    session_id = json.loads((fixture / "meta.json").read_text())["session_id"]
    folder = tmp_path / "rec"
    folder.mkdir()
    shutil.copy(fixture / "session.jsonl", folder / f"{session_id}.jsonl")
    if with_subagents:
        shutil.copytree(fixture / session_id / "subagents", folder / session_id / "subagents")
    agent_id = next((fixture / session_id / "subagents").glob("*.jsonl")).stem.removeprefix("agent-")
    return folder / f"{session_id}.jsonl", session_id, agent_id


def replay(tmp_path: Path, version: str, session: Path, **extra: Any) -> tuple[dict[str, Any], Path, Path]:
    """A replay-only run of batches 1..3 under bwrap (the workspace at the recorded cwd): (result, out dir, ws)."""
    workspace = tmp_path / "ws"
    shutil.copytree(FIXTURES / version / "subagent" / "workspace-initial", workspace)
    result = execute(build_request({
        "agent": "claude-code", "trajectory": str(session), "after_step": extra.pop("after_step", 3),
        "replay_only": True, "workspace": str(workspace), "sandbox": "bwrap", "state_dir": str(tmp_path / "state"),
        "output_dir": str(tmp_path / "out"), "run_id": "r", "on_divergence": "ignore", **extra}, source="test"))
    return result.to_json(), tmp_path / "out" / "r", workspace


def rows(out: Path) -> list[dict[str, Any]]:
    document = json.loads((out / "observations.json").read_text())
    return document if isinstance(document, list) else list(document.get("observations", document))


@needs_bwrap
@pytest.mark.parametrize("version", VERSIONS)
def test_subagent_calls_rerun_in_order_and_its_answer_is_reused(tmp_path: Path, version: str) -> None:
    session, session_id, agent_id = recording(tmp_path, version)
    result, out, workspace = replay(tmp_path, version, session)
    assert result["failure"] is None, result["failure"]
    assert "subagent_answer_reused" in result["quality_reasons"]
    assert "stale_observations" not in result["quality_reasons"]
    table = rows(out)
    # the sub-agent's three calls ran (and matched) before the parent's Agent call; its answer is reused
    assert [(row["name"], row["subagent"]) for row in table] == [
        ("Bash", None), ("Bash", f"agent-{agent_id}"), ("Read", f"agent-{agent_id}"), ("Bash", f"agent-{agent_id}"),
        ("Agent", None), ("Bash", None)]
    assert all(row["exact"] for row in table if row["name"] != "Agent"), table
    agent = table[4]
    assert agent["reused"] == "subagent_answer_reused" and not agent["stale_reused"] and not agent["exact"]
    # the workspace at the boundary is what the parent saw: the sub-agent's file, then the parent read it (exact)
    assert (workspace / "sub.txt").read_text() == "from-sub\n"
    assert result["metadata"]["observations_reused"] == {agent["id"]: "subagent_answer_reused"}
    # the rebuilt session carries the transcript where the binary keeps it, its results the fresh ones
    rebuilt = out / "native" / "prefix" / session_id / "subagents" / f"agent-{agent_id}.jsonl"
    assert rebuilt.is_file() and rebuilt.with_name(f"agent-{agent_id}.meta.json").is_file()
    assert b"from-sub" in rebuilt.read_bytes() or b"sub.txt" in rebuilt.read_bytes()
    parsed = [json.loads(line) for line in rebuilt.read_text().splitlines()]
    assert all(line.get("isSidechain") is True for line in parsed if "uuid" in line)


@needs_bwrap
def test_missing_transcript_is_refused_naming_it_or_reused_when_allowed(tmp_path: Path) -> None:
    session, session_id, agent_id = recording(tmp_path, "2.1.332", with_subagents=False)
    result, _, workspace = replay(tmp_path, "2.1.332", session)
    failure = result["failure"]
    assert failure is not None and failure["category"] == "trajectory_error"
    assert f"{session_id}/subagents/agent-{agent_id}.jsonl" in failure["message"]
    assert "--allow-stale-observations" in failure["message"]
    assert not (workspace / "log.txt").exists()  # refused before anything ran
    shutil.rmtree(tmp_path / "ws")
    result, out, workspace = replay(tmp_path, "2.1.332", session, allow_stale_observations=True, run_id="r")
    assert result["failure"] is None and "stale_observations" in result["quality_reasons"]
    names = [(row["name"], row["subagent"], row["stale_reused"]) for row in rows(out)]
    assert names == [("Bash", None, False), ("Agent", None, True), ("Bash", None, False)]
    assert not (workspace / "sub.txt").exists()  # the sub-agent's calls were not re-run


def _agent_call(session: Path) -> Any:
    parsed = parse_session(session)
    return next(call for batch in parsed.batches for call in batch.calls if call.name == "Agent")


def test_a_transcript_that_is_a_symlink_is_refused_and_not_followed(tmp_path: Path) -> None:
    session, session_id, agent_id = recording(tmp_path, "2.1.332")
    transcript = session.parent / session_id / "subagents" / f"agent-{agent_id}.jsonl"
    elsewhere = tmp_path / "elsewhere.jsonl"
    transcript.rename(elsewhere)  # a valid transcript: following the link would make the call re-runnable
    transcript.symlink_to(elsewhere)
    call = _agent_call(session)
    assert call.policy is CallPolicy.REFUSED and "symbolic link" in (call.policy_reason or "")
    assert call.subcalls == ()


def test_a_linked_subagents_folder_is_refused(tmp_path: Path) -> None:
    session, session_id, _ = recording(tmp_path, "2.1.332")
    folder = session.parent / session_id / "subagents"
    folder.rename(tmp_path / "real-subagents")
    folder.symlink_to(tmp_path / "real-subagents")
    call = _agent_call(session)
    assert call.policy is CallPolicy.REFUSED and call.subcalls == ()


def test_a_fifo_transcript_is_refused_without_blocking(tmp_path: Path) -> None:
    session, session_id, agent_id = recording(tmp_path, "2.1.332")
    transcript = session.parent / session_id / "subagents" / f"agent-{agent_id}.jsonl"
    transcript.unlink()
    os.mkfifo(transcript)  # opened for reading, a FIFO without a writer would block the parse forever
    call = _agent_call(session)
    assert call.policy is CallPolicy.REFUSED and "not a regular file" in (call.policy_reason or "")


def test_a_huge_transcript_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subagents, "MAX_TRANSCRIPT_BYTES", 1 << 20)  # the bound, lowered: the read stops past it
    session, session_id, agent_id = recording(tmp_path, "2.1.332")
    transcript = session.parent / session_id / "subagents" / f"agent-{agent_id}.jsonl"
    with transcript.open("ab") as handle:
        handle.truncate(3 << 20)
    call = _agent_call(session)
    assert call.policy is CallPolicy.REFUSED and str(1 << 20) in (call.policy_reason or "")


def test_an_agent_id_that_would_leave_the_session_folder_is_refused(tmp_path: Path) -> None:
    session, session_id, agent_id = recording(tmp_path, "2.1.332")
    planted = tmp_path / "agent-x.jsonl"  # where "../../agent-x" would point: a valid transcript, never read
    shutil.copy(session.parent / session_id / "subagents" / f"agent-{agent_id}.jsonl", planted)
    text = session.read_text().replace(f'"agentId":"{agent_id}"', '"agentId":"../../x"')
    session.write_text(text)
    call = _agent_call(session)
    assert call.policy is CallPolicy.REFUSED and "outside the session folder" in (call.policy_reason or "")


def test_an_incomplete_transcript_is_stale_naming_it(tmp_path: Path) -> None:
    session, session_id, agent_id = recording(tmp_path, "2.1.220")
    transcript = session.parent / session_id / "subagents" / f"agent-{agent_id}.jsonl"
    lines = transcript.read_text().splitlines(keepends=True)
    transcript.write_text("".join(lines[:-2]))  # the last result and the final answer never written
    call = _agent_call(session)
    assert call.policy is CallPolicy.STALE and "incomplete" in (call.policy_reason or "")
    assert str(transcript) in (call.policy_reason or "")


def test_inspect_lists_the_subagent_calls_and_does_not_call_the_reused_answer_stale(tmp_path: Path) -> None:
    from forkpoint.run.inspection import describe

    session, _, agent_id = recording(tmp_path, "2.1.332")
    agent = next(call for batch in describe(session, "claude-code")["batches"] for call in batch["calls"]
                 if call["name"] == "Agent")
    assert (agent["policy"], agent["stale"]) == ("reused", False)
    assert [(sub["name"], sub["subagent"]) for sub in agent["subagent_calls"]] == [
        ("Bash", f"agent-{agent_id}"), ("Read", f"agent-{agent_id}"), ("Bash", f"agent-{agent_id}")]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_sub_agent_shares_the_read_state_but_has_its_own_shell_directory(tmp_path: Path, version: str) -> None:
    """Measured on both versions: the parent's Edit of a file only its sub-agent read succeeds; a sub-agent's shell
    starts in the parent's directory and its `cd` does not move the parent's."""
    from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor
    from forkpoint.core.model import Observation, RunContext, ToolCall

    workspace = tmp_path / "ws"
    (workspace / "sub" / "deeper").mkdir(parents=True)
    (workspace / "base.txt").write_text("base\n")
    executor = ClaudeToolExecutor(RunContext(workspace, tmp_path / "state", tmp_path / "out"), version,
                                  "11111111-2222-3333-4444-555555555555", tmp_path / "home" / ".claude")
    ids = iter(range(100))

    def run(name: str, agent: str | None = None, **arguments: Any) -> str:
        call = ToolCall(f"toolu_{next(ids)}", name, arguments, Observation(""), subagent=agent)
        return str(executor.run(call).content)

    try:
        run("Bash", command="cd sub")
        assert run("Bash", "agent-a", command="pwd").endswith("/ws/sub")  # starts where the parent is
        run("Bash", "agent-a", command="cd deeper")
        run("Read", "agent-a", file_path=str(workspace / "base.txt"))
        assert run("Bash", command="pwd").endswith("/ws/sub")  # the sub-agent's cd did not move the parent
        assert "has been updated successfully" in run("Edit", file_path=str(workspace / "base.txt"),
                                                      old_string="base", new_string="edited")
        assert run("Bash", "agent-a", command="pwd").endswith("/ws/sub/deeper")  # its own directory kept
    finally:
        executor.close()
    assert (workspace / "base.txt").read_text() == "edited\n"
