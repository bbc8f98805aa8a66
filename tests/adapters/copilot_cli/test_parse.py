"""Reading Copilot CLI 1.0.102 session-state event logs: the real binary's fixture and hostile hand-made ones."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.copilot_cli.parse import parse_copilot
from forkpoint.adapters.detect import guess_agent
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import CallPolicy

FIXTURE = Path(__file__).parents[2] / "fixtures" / "copilot_cli" / "1.0.102" / "tools"
SESSION = "0cb916db-26aa-40f2-86b5-1ba81b225fd2"


def event(kind: str, **data: Any) -> dict[str, Any]:
    return {"type": kind, "data": data, "id": f"e-{kind}", "timestamp": "2026-01-01T00:00:00Z", "parentId": None}


def start(session_id: str = SESSION) -> dict[str, Any]:
    return event("session.start", sessionId=session_id, version=1, producer="copilot-agent", copilotVersion="1.0.102",
                 context={"cwd": "/tmp/ws"}, selectedModel="gpt-4.1")


def calls(*requests: tuple[str, str, Any]) -> dict[str, Any]:
    return event("assistant.message", content="", model="gpt-4.1",
                 toolRequests=[{"toolCallId": i, "name": n, "arguments": a, "type": "function"}
                               for i, n, a in requests])


def done(call_id: str, text: str = "ok", success: bool = True) -> dict[str, Any]:
    if success:
        return event("tool.execution_complete", toolCallId=call_id, success=True, result={"content": text})
    return event("tool.execution_complete", toolCallId=call_id, success=False, error={"message": text})


def write(tmp_path: Path, *events: dict[str, Any]) -> Path:
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_the_real_recording_parses_into_its_batches() -> None:
    parsed = parse_copilot(FIXTURE / "session.jsonl")
    assert parsed.agent == "copilot-cli" and parsed.version == "1.0.102"
    assert parsed.cwd == "/tmp/forkpoint-rec-copilot/tools" and parsed.complete_count == 8
    assert [len(b.calls) for b in parsed.batches] == [1, 2, 1, 2, 2, 2, 1, 1]
    names = [c.name for b in parsed.batches for c in b.calls]
    assert names == ["bash", "view", "view", "edit", "create", "create", "grep", "glob", "view", "edit", "bash", "bash"]
    failed = {c.name: c.historical.content for b in parsed.batches for c in b.calls
              if c.historical is not None and c.historical.is_error}
    assert failed == {"create": "Parent directory does not exist", "view": "Path does not exist",
                      "edit": "No match found"}
    assert all(c.policy is CallPolicy.FRESH for b in parsed.batches for c in b.calls)
    assert parsed.next_actions[-1] is not None and parsed.next_actions[-1].text.startswith("Done")
    assert guess_agent(FIXTURE / "session.jsonl") == "copilot-cli"


@pytest.mark.parametrize("session_id", ["../../../etc", "/abs/path", "a/b", ""])
def test_a_session_id_that_is_not_a_uuid_is_refused(tmp_path: Path, session_id: str) -> None:
    path = write(tmp_path, start(session_id), event("user.message", content="hi"), calls(("c1", "bash", {})),
                 done("c1"))
    with pytest.raises(ReplayError, match="session id"):
        parse_copilot(path)


@pytest.mark.parametrize("kind", ["session.compaction_complete", "session.truncation", "session.snapshot_rewind",
                                  "session.context_cleared"])
def test_an_event_that_rewrites_the_conversation_is_refused(tmp_path: Path, kind: str) -> None:
    path = write(tmp_path, start(), event("user.message", content="hi"), event(kind))
    with pytest.raises(ReplayError, match="rewrites the conversation"):
        parse_copilot(path)


def test_hostile_structures_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="first event"):
        parse_copilot(write(tmp_path, event("user.message", content="hi"), start()))
    with pytest.raises(ReplayError, match="used twice"):
        parse_copilot(write(tmp_path, start(), event("user.message", content="hi"), calls(("c1", "bash", {})),
                            done("c1"), calls(("c1", "bash", {})), done("c1")))
    with pytest.raises(ReplayError, match="incomplete"):
        parse_copilot(write(tmp_path, start(), event("user.message", content="hi"), calls(("c1", "bash", {})),
                            calls(("c2", "bash", {})), done("c2")))
    with pytest.raises(ReplayError, match="arguments must be an object"):
        parse_copilot(write(tmp_path, start(), event("user.message", content="hi"), calls(("c1", "bash", "ls"))))
    with pytest.raises(ReplayError, match="another session"):
        parse_copilot(write(tmp_path, start(), start("11111111-2222-3333-4444-555555555555"),
                            event("user.message", content="hi")))


def test_policies_name_why_a_call_is_not_re_run(tmp_path: Path) -> None:
    path = write(tmp_path, start(), event("user.message", content="hi"),
                 calls(("t", "task", {"prompt": "go"}), ("m", "github-mcp-server-get_issue", {}),
                       ("a", "bash", {"command": "sleep 9", "mode": "async"}), ("r", "read_bash", {"shellId": "1"})),
                 done("t"), done("m"), done("a"), done("r"),
                 # a sub-agent's own events carry the task call; they are not batches of the main agent
                 {**calls(("s1", "bash", {"command": "ls"})), "data": {
                     **calls(("s1", "bash", {"command": "ls"}))["data"], "parentToolCallId": "t"}})
    (batch,) = parse_copilot(path).batches
    policies = {c.name: c.policy for c in batch.calls}
    assert policies == {"task": CallPolicy.STALE, "github-mcp-server-get_issue": CallPolicy.REFUSED,
                        "bash": CallPolicy.STALE, "read_bash": CallPolicy.STALE}
    assert "sub-agent" in (batch.calls[0].policy_reason or "")
