"""OpenCode parsing: real recordings (both inputs agree) and hand-made edge cases of the event log."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.opencode.parse import classify, parse_opencode
from forkpoint.adapters.opencode.tool_profile import line_for
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import CallPolicy

FIXTURES = Path(__file__).parents[2] / "fixtures" / "opencode"
RECORDINGS = sorted(p.parent for p in FIXTURES.glob("*/*/export.json"))


def write_events(path: Path, events: list[Any], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in events) + tail)
    return path


def step(message: str, part: str) -> dict[str, Any]:
    return {"type": "step_start", "sessionID": "ses_x",
            "part": {"id": part, "messageID": message, "sessionID": "ses_x", "type": "step-start"}}


def finish(message: str, part: str, reason: str = "tool-calls") -> dict[str, Any]:
    return {"type": "step_finish", "sessionID": "ses_x",
            "part": {"id": part, "messageID": message, "type": "step-finish", "reason": reason}}


def tool(message: str, part: str, call: str, name: str = "bash", status: str = "completed",
         output: str = "ok\n", **extra: Any) -> dict[str, Any]:
    state: dict[str, Any] = {"status": status, "input": {"command": f"echo {call}"}, **extra}
    if status == "completed":
        state["output"] = output
    elif status == "error":
        state["error"] = output
    return {"type": "tool_use", "sessionID": "ses_x",
            "part": {"id": part, "messageID": message, "type": "tool", "tool": name, "callID": call, "state": state}}


@pytest.mark.parametrize("fixture", [r for r in RECORDINGS if line_for(r.parent.name) is None],
                         ids=lambda p: f"{p.parent.name}-{p.name}")
def test_event_log_and_export_agree(fixture: Path) -> None:
    events, export = parse_opencode(fixture / "events.jsonl"), parse_opencode(fixture / "export.json")
    assert export.version == fixture.parent.name and events.version is None
    assert export.session_id == events.session_id and export.session_id
    assert export.cwd == json.loads((fixture / "meta.json").read_text())["cwd"]
    assert export.complete_count == events.complete_count == len(export.batches) >= 2
    assert [b.calls for b in export.batches] == [b.calls for b in events.batches]
    if "--thinking" in json.loads((fixture / "meta.json").read_text())["command"]:
        assert export.next_actions == events.next_actions
    else:  # a plain `run --format=json` log prints no reasoning
        assert [a and dataclasses.replace(a, reasoning="") for a in export.next_actions] == list(events.next_actions)
    assert not export.warnings and any("no user prompt" in w for w in events.warnings)


def test_a_1_2_event_log_lacks_its_failed_calls_and_its_export_has_them() -> None:
    """1.2's ``run --format=json`` prints only completed tool parts: a step whose calls all failed is no batch of
    the log (its export, which replays, has it; the log with the export is the export, below)."""
    fixture = FIXTURES / "1.2.6" / "old_line"
    events, export = parse_opencode(fixture / "events.jsonl"), parse_opencode(fixture / "export.json")
    logged = {c.call_id for b in events.batches for c in b.calls}
    failed = {c.call_id for b in export.batches for c in b.calls if c.historical and c.historical.is_error}
    assert len(failed) == 2 and not logged & failed
    assert {c.call_id for b in export.batches for c in b.calls} == logged | failed


@pytest.mark.parametrize("fixture", RECORDINGS, ids=lambda p: f"{p.parent.name}-{p.name}")
def test_event_log_with_its_export_is_the_export(fixture: Path) -> None:
    """What the log lacks (prompt, version, reasoning, message details) comes from the export; nothing twice."""
    completed = parse_opencode(fixture / "events.jsonl", export=fixture / "export.json")
    export = parse_opencode(fixture / "export.json")
    assert completed.source_path == fixture / "events.jsonl" and completed.version == export.version
    assert completed.batches == export.batches and completed.next_actions == export.next_actions
    assert completed.native.form == "export" and completed.native.prompt_known
    assert completed.native.messages == export.native.messages and completed.native.shell == export.native.shell
    assert any("come from the OpenCode export" in w for w in completed.warnings)


def test_export_must_be_of_the_logged_run(tmp_path: Path) -> None:
    fixture = FIXTURES / "1.18.33" / "run_log"
    other = FIXTURES / "1.18.33" / "bash_basic" / "export.json"
    with pytest.raises(ReplayError) as caught:
        parse_opencode(fixture / "events.jsonl", export=other)
    message = caught.value.message
    assert "the OpenCode export is of session" in message and "opencode export ses_" in message
    export = json.loads((fixture / "export.json").read_text())
    tool_part = next(p for m in export["messages"] for p in m["parts"] if p["type"] == "tool")
    tool_part["state"]["output"] = "something else\n"
    (tmp_path / "edited.json").write_text(json.dumps(export))
    with pytest.raises(ReplayError) as caught:
        parse_opencode(fixture / "events.jsonl", export=tmp_path / "edited.json")
    assert f"disagrees with the event log on part {tool_part['id']}" in caught.value.message
    export = json.loads((fixture / "export.json").read_text())
    export["messages"] = export["messages"][:2]  # an export taken before the run ended
    (tmp_path / "early.json").write_text(json.dumps(export))
    with pytest.raises(ReplayError) as caught:
        parse_opencode(fixture / "events.jsonl", export=tmp_path / "early.json")
    assert "lacks message msg_" in caught.value.message
    with pytest.raises(ReplayError) as caught:
        parse_opencode(fixture / "export.json", export=fixture / "export.json")
    assert "already an `opencode export` JSON" in caught.value.message
    with pytest.raises(ReplayError) as caught:
        parse_opencode(fixture / "events.jsonl", export=fixture / "events.jsonl")
    assert "is not an `opencode export` JSON" in caught.value.message


def test_later_runs_of_the_session_are_cut_off(tmp_path: Path) -> None:
    """An export taken after the session went on: the log's run ends the trajectory."""
    fixture = FIXTURES / "1.17.11" / "run_log"
    events = [json.loads(line) for line in (fixture / "events.jsonl").read_text().splitlines()]
    last_message = next(e["part"]["messageID"] for e in events if e["type"] == "tool_use")
    first_step = [e for e in events if e["part"]["messageID"] == last_message]  # only the first step was logged
    log = write_events(tmp_path / "first.jsonl", first_step)
    parsed = parse_opencode(log, export=fixture / "export.json")
    assert [m.role for m in parsed.native.messages] == ["user", "assistant"]
    assert len(parsed.batches) == 1 and parsed.next_actions[-1] is None
    assert parsed.batches[0] == parse_opencode(fixture / "export.json").batches[0]


@pytest.mark.parametrize("version", ["1.17.11", "1.18.33"])
def test_the_shell_comes_from_the_recorded_shell_error(version: str) -> None:
    """SHELL was unset while recording, so OpenCode ran `bash` from PATH; its error line names /usr/bin/bash."""
    assert parse_opencode(FIXTURES / version / "long_session" / "export.json").native.shell == "/usr/bin/bash"
    assert parse_opencode(FIXTURES / version / "bash_basic" / "export.json").native.shell is None


@pytest.mark.parametrize(("outputs", "shell", "warned"), [
    (["/bin/bash: line 1: nope: command not found\n"], "/bin/bash", False),
    (["x\n/bin/sh: 1: nope: not found\n"], "/bin/sh", False),
    (["/usr/bin/zsh:1: command not found: nope\n"], "/usr/bin/zsh", False),
    (["bash: line 1: nope: command not found\n", "/home/u/bash: line 1: x\n"], "/home/u/bash", False),
    (["/usr/bin/bash: line 1: a: command not found\n", "/bin/bash: line 3: b: command not found\n"],
     "/usr/bin/bash", True),
    (["/usr/bin/python: line 1: not a shell\n", "see /bin/bash: line 1: quoted\n"], None, False),
])
def test_recorded_shell_is_the_first_shell_error_path(tmp_path: Path, outputs: list[str], shell: str | None,
                                                      warned: bool) -> None:
    events = [step("msg_1", "prt_10")]
    events += [tool("msg_1", f"prt_1{i + 1}", f"call_{i}", output=out) for i, out in enumerate(outputs)]
    parsed = parse_opencode(write_events(tmp_path / "run.jsonl", [*events, finish("msg_1", "prt_19")]))
    assert parsed.native.shell == shell
    assert any("several shells" in w for w in parsed.warnings) == warned


def test_parallel_batch_is_in_call_order_although_completed_out_of_order(tmp_path: Path) -> None:
    log = write_events(tmp_path / "run.jsonl", [
        step("msg_1", "prt_a0"),
        tool("msg_1", "prt_a3", "call_c"), tool("msg_1", "prt_a1", "call_a"), tool("msg_1", "prt_a2", "call_b"),
        finish("msg_1", "prt_a9"),
        step("msg_2", "prt_b0"),
        {"type": "text", "sessionID": "ses_x", "part": {"id": "prt_b1", "messageID": "msg_2", "type": "text",
                                                        "text": "done"}},
        finish("msg_2", "prt_b9", "stop"),
    ])
    parsed = parse_opencode(log)
    assert [c.call_id for c in parsed.batches[0].calls] == ["call_a", "call_b", "call_c"]
    assert parsed.complete_count == 1 and parsed.batches[0].locator == "line:1"
    last = parsed.next_actions[1]
    assert last is not None and last.text == "done" and last.tools == ()


def test_states_of_one_part_merge_and_a_terminal_state_wins(tmp_path: Path) -> None:
    log = write_events(tmp_path / "run.jsonl", [
        step("msg_1", "prt_1"),
        tool("msg_1", "prt_2", "call_a", status="running"),
        tool("msg_1", "prt_2", "call_a", output="final\n"),
        tool("msg_1", "prt_2", "call_a", status="running"),
        finish("msg_1", "prt_9"),
    ])
    parsed = parse_opencode(log)
    assert len(parsed.batches[0].calls) == 1
    call = parsed.batches[0].calls[0]
    assert call.historical is not None and call.historical.content == "final\n"
    assert parsed.complete_count == 1


def test_repeated_call_ids_across_runs_stay_distinct(tmp_path: Path) -> None:
    log = write_events(tmp_path / "run.jsonl", [
        step("msg_1", "prt_10"), tool("msg_1", "prt_11", "call_002_0"), finish("msg_1", "prt_19"),
        step("msg_2", "prt_20"), tool("msg_2", "prt_21", "call_002_0"), finish("msg_2", "prt_29"),
    ])
    ids = [b.calls[0].call_id for b in parse_opencode(log).batches]
    assert ids == ["call_002_0@prt_11", "call_002_0@prt_21"]


def test_unfinished_step_and_everything_after_it_are_incomplete(tmp_path: Path) -> None:
    log = write_events(tmp_path / "run.jsonl", [
        step("msg_1", "prt_10"), tool("msg_1", "prt_11", "call_a"), finish("msg_1", "prt_19"),
        step("msg_2", "prt_20"), tool("msg_2", "prt_21", "call_b"),  # killed before step_finish
        step("msg_3", "prt_30"), tool("msg_3", "prt_31", "call_c"), finish("msg_3", "prt_39"),
    ])
    parsed = parse_opencode(log)
    assert [b.complete for b in parsed.batches] == [True, False, False]
    assert parsed.complete_count == 1 and parsed.incomplete_tail


def test_error_states_and_tool_policies(tmp_path: Path) -> None:
    log = write_events(tmp_path / "run.jsonl", [
        step("msg_1", "prt_10"),
        tool("msg_1", "prt_11", "call_a", name="read", status="error", output="File not found: /x"),
        tool("msg_1", "prt_12", "call_b", name="webfetch"),
        tool("msg_1", "prt_13", "call_c", name="invalid"),
        tool("msg_1", "prt_14", "call_d", name="mcp_server_tool"),
        finish("msg_1", "prt_19"),
    ])
    calls = parse_opencode(log).batches[0].calls
    assert calls[0].historical is not None and calls[0].historical.is_error
    assert calls[0].historical.content == "File not found: /x" and calls[0].policy is CallPolicy.FRESH
    assert [c.policy for c in calls[1:]] == [CallPolicy.STALE, CallPolicy.STALE, CallPolicy.REFUSED]
    assert "mcp_server_tool" in (calls[3].policy_reason or "")


def test_user_events_give_the_prompt(tmp_path: Path) -> None:
    log = write_events(tmp_path / "run.jsonl", [
        {"type": "user", "sessionID": "ses_x", "part": {"id": "prt_00", "messageID": "msg_0", "text": "Do it"}},
        step("msg_1", "prt_10"), tool("msg_1", "prt_11", "call_a"), finish("msg_1", "prt_19"),
    ])
    parsed = parse_opencode(log)
    assert parsed.native.prompt_known and not parsed.warnings
    assert [m.role for m in parsed.native.messages] == ["user", "assistant"]


def test_torn_last_line_warns_and_errors_are_recorded(tmp_path: Path) -> None:
    log = write_events(tmp_path / "run.jsonl", [
        step("msg_1", "prt_10"), tool("msg_1", "prt_11", "call_a"), finish("msg_1", "prt_19"),
        {"type": "error", "sessionID": "ses_x", "error": {"name": "APIError", "data": {"message": "boom"}}},
        {"type": "mystery", "sessionID": "ses_x"},
    ], tail='{"type":"step_start","part":{')
    parsed = parse_opencode(log)
    assert parsed.complete_count == 1
    text = " ".join(parsed.warnings)
    assert "torn final line" in text and "boom" in text and "mystery" in text


@pytest.mark.parametrize(("lines", "message"), [
    ('{"type":"mystery"}\nnot json\n{"type":"mystery"}\n', "invalid JSON at line 2"),
    ('{"type":"tool_use","sessionID":"s"}\n', "has no part"),
    ('{"type":"tool_use","part":{"id":"p","messageID":"m","type":"tool","tool":"bash","callID":"c"}}\n',
     "has no state"),
    ('{"type":"text","part":{"id":"p","type":"text"}}\n', "has no messageID"),
    ('[1,2]\n{"a":1}\n', "not an OpenCode event"),
    ('{"info":{"id":"ses_1"},"messages":[{"info":{"role":"system","id":"m"},"parts":[]}]}', "role user/assistant"),
    ('{"info":{},"messages":[]}', "no session info"),
])
def test_malformed_input_is_a_typed_trajectory_error(tmp_path: Path, lines: str, message: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(lines)
    with pytest.raises(ReplayError) as caught:
        parse_opencode(path)
    assert caught.value.kind.category == "trajectory_error" and message in caught.value.message


def test_both_inputs_are_recognised_as_opencode() -> None:
    from forkpoint.adapters.detect import guess_agent

    fixture = FIXTURES / "1.18.33" / "files"
    assert guess_agent(fixture / "export.json") == guess_agent(fixture / "events.jsonl") == "opencode"


@pytest.mark.parametrize(("name", "policy", "reason"), [
    ("apply_patch", CallPolicy.FRESH, None),
    ("skill", CallPolicy.FRESH, None),  # OpenCode's own skill tool re-runs it (tools.SKILL_MISSING otherwise)
    ("list", CallPolicy.STALE, "no longer have it"),
    ("websearch", CallPolicy.STALE, "search results change"),
    ("webfetch", CallPolicy.STALE, "web content changes"),
    ("mcp_server_tool", CallPolicy.REFUSED, "does not know"),
])
def test_tools_real_recordings_use_are_classified(name: str, policy: CallPolicy, reason: str | None) -> None:
    got, why = classify(name)
    assert got is policy
    assert (why is None) if reason is None else (why is not None and reason in why)


WILD_JOLLY_EAGLE = Path("/work/shared/wild-dev/opencode/darkfactory-1.2.5-jolly-eagle.json")


def test_a_task_call_names_its_child_session(tmp_path: Path) -> None:
    """``opencode export`` carries no child session: the task call is stale with a precise reason naming it."""
    log = write_events(tmp_path / "run.jsonl", [
        step("msg_1", "prt_10"),
        tool("msg_1", "prt_11", "call_a", name="task"),
        finish("msg_1", "prt_19"),
    ])
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    lines[1]["part"]["state"]["input"] = {"subagent_type": "gitter", "prompt": "commit", "description": "d"}
    lines[1]["part"]["state"]["metadata"] = {"sessionId": "ses_child123"}
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    (call,) = parse_opencode(log).batches[0].calls
    assert call.policy is CallPolicy.STALE and call.policy_reason is not None
    assert call.policy_reason.startswith("subagent_transcript_missing: the sub-agent 'gitter' ran in child session "
                                         "ses_child123")


def test_the_public_skill_and_task_recording_is_classified() -> None:
    if not WILD_JOLLY_EAGLE.is_file():
        pytest.skip(f"{WILD_JOLLY_EAGLE} is not on this machine")
    skill, task = (batch.calls[0] for batch in parse_opencode(WILD_JOLLY_EAGLE).batches)
    assert (skill.name, skill.policy) == ("skill", CallPolicy.FRESH)
    assert task.name == "task" and task.policy is CallPolicy.STALE
    assert "subagent_transcript_missing" in (task.policy_reason or "")
    assert "ses_39b5d3ed8ffea9fQ9vQMuZnTtO" in (task.policy_reason or "")
