"""mini-swe-agent parsing: the recorded fixtures of both schemas, and hand-made edge cases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.mini_swe_agent import MiniSweAgentAdapter
from forkpoint.adapters.mini_swe_agent.parse import MiniNative, is_error_v1, is_error_v2, parse_trajectory
from forkpoint.core.errors import ErrorKind, ReplayError

FIXTURES = Path(__file__).parents[2] / "fixtures" / "mini_swe_agent"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat calc.py"


def _write(tmp_path: Path, data: Any, name: str = "t.traj.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def _native(path: Path) -> MiniNative:
    native = parse_trajectory(path).native
    assert isinstance(native, MiniNative)
    return native


def test_v1_fixture_batches_observations_and_final_submission() -> None:
    parsed = parse_trajectory(FIXTURES / "1.17.5" / "basic" / "trajectory.traj.json")
    assert (parsed.agent, parsed.version) == ("mini-swe-agent", "1.17.5")
    assert parsed.cwd == "/tmp/forkpoint-rec-mini/1.17.5/basic"
    commands = [call.arguments["command"] for batch in parsed.batches for call in batch.calls]
    assert commands == ["cat calc.py", "ls && wc -l calc.py notes.txt", "seq 1 3000",
                        "sed -i 's/a - b/a + b/' calc.py && cat calc.py"]
    first = parsed.batches[0].calls[0]
    assert first.historical is not None and first.historical.content.startswith("<returncode>0</returncode>")
    long_output = parsed.batches[2].calls[0].historical
    assert long_output is not None and "<elided_chars>" in long_output.content
    final = parsed.next_actions[-1]
    assert final is not None and final.tools == (("bash", {"command": SUBMIT}),)  # the submission is no batch
    assert len(parsed.next_actions) == parsed.complete_count + 1


def test_v1_failures_timeout_and_format_errors() -> None:
    failing = parse_trajectory(FIXTURES / "1.17.5" / "failing" / "trajectory.traj.json")
    flags = [call.historical.is_error for b in failing.batches for call in b.calls if call.historical]
    assert flags == [True, True, True, False]
    timeout = failing.batches[2].calls[0].historical
    assert timeout is not None and timeout.content.startswith("The last command <command>echo started")
    with_errors = parse_trajectory(FIXTURES / "1.17.5" / "format_error" / "trajectory.traj.json")
    native = with_errors.native
    assert isinstance(native, MiniNative)
    assert [b.locator for b in with_errors.batches] == ["messages[2]", "messages[8]"]
    assert native.prefix_calls(1) == 1 and native.prefix_calls(2) == 4  # two format-error turns in between
    after_first = with_errors.next_actions[1]
    assert after_first is not None and after_first.tools == () and "forgot" in after_first.text


def test_v2_fixture_parallel_batches_by_tool_call_id() -> None:
    parsed = parse_trajectory(FIXTURES / "2.4.6" / "parallel" / "trajectory.traj.json")
    assert [len(b.calls) for b in parsed.batches] == [2, 3, 1]
    three = parsed.batches[1].calls
    assert [c.arguments["command"] for c in three] == ["ls sub", "ls does-not-exist", "wc -c calc.py"]
    assert [c.historical.is_error for c in three if c.historical] == [False, True, False]
    message = _native(FIXTURES / "2.4.6" / "parallel" / "trajectory.traj.json").messages[5]
    assert [c.call_id for c in three] == [tc["id"] for tc in message["tool_calls"]]


def test_v2_format_error_turn_is_a_model_call_without_assistant_message() -> None:
    path = FIXTURES / "2.4.6" / "format_error" / "trajectory.traj.json"
    parsed = parse_trajectory(path)
    native = _native(path)
    assert native.prefix_calls(2) == 3
    rejected = parsed.next_actions[1]
    assert rejected is not None and rejected.text == "I forgot the tool call." and rejected.tools == ()


def _v2(messages: list[dict[str, Any]], exit_status: str = "Submitted") -> dict[str, Any]:
    return {"info": {"mini_version": "2.4.6", "exit_status": exit_status, "config": {}},
            "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "task"}, *messages],
            "trajectory_format": "mini-swe-agent-1.1"}


def _call(index: int, command: str, call_id: str | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    action: dict[str, Any] = {"command": command}
    if call_id:
        action["tool_call_id"] = call_id
    tool = {"role": "tool" if call_id else "user", "content": f"out {index}",
            "extra": {"returncode": 0, "raw_output": "x"}}
    if call_id:
        tool["tool_call_id"] = call_id
    return action, tool


def test_v2_observations_matched_by_id_even_out_of_order(tmp_path: Path) -> None:
    (a1, o1), (a2, o2) = _call(1, "ls", "c1"), _call(2, "pwd", "c2")
    assistant = {"role": "assistant", "content": "two", "extra": {"actions": [a1, a2]}}
    parsed = parse_trajectory(_write(tmp_path, _v2([assistant, o2, o1])))
    assert [(c.call_id, c.historical.content if c.historical else None) for c in parsed.batches[0].calls] == [
        ("c1", "out 1"), ("c2", "out 2")]


def test_v2_text_mode_actions_without_ids_and_incomplete_tail(tmp_path: Path) -> None:
    (a1, o1), (a2, _) = _call(1, "ls"), _call(2, "pwd")
    turns = [{"role": "assistant", "content": "one", "extra": {"actions": [a1]}}, o1,
             {"role": "assistant", "content": "cut", "extra": {"actions": [a2]}}]
    parsed = parse_trajectory(_write(tmp_path, _v2(turns, exit_status="")))
    assert parsed.complete_count == 1 and parsed.batches[0].calls[0].call_id == "mini-2-1"
    assert parsed.next_actions[1] is not None and parsed.next_actions[1].text == "cut"


def test_v2_submission_without_observation_is_final_not_a_batch(tmp_path: Path) -> None:
    (a1, o1), (a2, _) = _call(1, "ls", "c1"), _call(2, SUBMIT, "c2")
    turns = [{"role": "assistant", "content": "a", "extra": {"actions": [a1]}}, o1,
             {"role": "assistant", "content": "b", "extra": {"actions": [a2]}},
             {"role": "exit", "content": "x", "extra": {"exit_status": "Submitted", "submission": "x"}}]
    parsed = parse_trajectory(_write(tmp_path, _v2(turns)))
    assert parsed.complete_count == 1
    final = parsed.next_actions[1]
    assert final is not None and final.tools == (("bash", {"command": SUBMIT}),)


def test_v2_human_commands_make_later_boundaries_unusable(tmp_path: Path) -> None:
    (a1, o1), (a2, o2), (a3, o3) = _call(1, "ls", "c1"), _call(2, "whoami"), _call(3, "pwd", "c3")
    turns = [{"role": "assistant", "content": "a", "extra": {"actions": [a1]}}, o1,
             {"role": "user", "content": "User command: \n```bash\nwhoami\n```", "extra": {"actions": [a2]}}, o2,
             {"role": "assistant", "content": "b", "extra": {"actions": [a3]}}, o3]
    parsed = parse_trajectory(_write(tmp_path, _v2(turns, exit_status="")))
    assert parsed.complete_count == 2 and 1 not in parsed.boundary_refusals
    assert "messages[4] is a command the user issued" in parsed.boundary_refusals[2]


@pytest.mark.parametrize(("mutate", "needle"), [
    (lambda d: d.update(trajectory_format="mini-swe-agent-9"), "unknown mini-swe-agent trajectory_format"),
    (lambda d: d.update(messages={"a": 1}), "list of message objects"),
    (lambda d: d["messages"].__setitem__(0, {"content": "no role"}), "has no role"),
    (lambda d: d["messages"].pop(0), "starts with the system"),
    (lambda d: d["info"].update(mini_version="1.17.5"), "never written by mini-swe-agent 1.17.5"),
    (lambda d: d["messages"][2]["extra"].update(actions=[{"cmd": "ls"}]), "invalid native action"),
    (lambda d: d["messages"][2]["extra"].update(actions="ls"), "invalid extra.actions"),
])
def test_malformed_trajectories_are_trajectory_errors(tmp_path: Path, mutate: Any, needle: str) -> None:
    action, observation = _call(1, "ls", "c1")
    data = _v2([{"role": "assistant", "content": "a", "extra": {"actions": [action]}}, observation])
    mutate(data)
    with pytest.raises(ReplayError) as caught:
        parse_trajectory(_write(tmp_path, data))
    assert caught.value.kind is ErrorKind.TRAJECTORY and needle in caught.value.message


def test_not_json_and_not_an_object(tmp_path: Path) -> None:
    for raw in ("{not json", "[1, 2]"):
        path = tmp_path / "bad.json"
        path.write_text(raw)
        with pytest.raises(ReplayError) as caught:
            parse_trajectory(path)
        assert caught.value.kind is ErrorKind.TRAJECTORY


def test_legacy_v1_without_format_key_uses_the_old_action_regex(tmp_path: Path) -> None:
    """1.1-1.3 wrote no trajectory_format and no mini_version; 1.0-1.15 required ``bash\\n`` exactly."""
    data = {"info": {"exit_status": "Submitted", "submission": "done\n"}, "messages": [
        {"role": "system", "content": "sys"}, {"role": "user", "content": "task"},
        {"role": "assistant", "content": "THOUGHT\n\n```bash\nls\n```"},
        {"role": "user", "content": "<returncode>2</returncode>\n<output>\nnope\n</output>"},
        {"role": "assistant", "content": "Only a space: ```bash \nls\n```"},
        {"role": "user", "content": "Please always provide EXACTLY ONE action in triple backticks."},
        {"role": "assistant", "content": "```bash\necho MINI_SWE_AGENT_FINAL_OUTPUT\n```"},
        {"role": "user", "content": "done\n"}]}
    parsed = parse_trajectory(_write(tmp_path, data))
    assert parsed.version is None and parsed.warnings and "no trajectory_format" in parsed.warnings[0]
    assert parsed.complete_count == 1 and parsed.batches[0].calls[0].historical is not None
    assert parsed.batches[0].calls[0].historical.is_error
    assert parsed.next_actions[1] is not None and parsed.next_actions[1].tools == ()  # a format error (old regex)
    with pytest.raises(ReplayError) as caught:
        MiniSweAgentAdapter().profile_for(parsed)
    assert caught.value.kind is ErrorKind.UNSUPPORTED_VERSION


def test_v1_configured_action_regex_and_limits_exceeded_tail(tmp_path: Path) -> None:
    data: dict[str, Any] = {"info": {"exit_status": "LimitsExceeded", "mini_version": "1.17.5",
                     "config": {"agent": {"action_regex": r"<cmd>(.*?)</cmd>"}}},
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "t"},
                         {"role": "assistant", "content": "<cmd>ls</cmd>"}, {"role": "user", "content": "obs"},
                         {"role": "user", "content": ""}],
            "trajectory_format": "mini-swe-agent-1"}
    parsed = parse_trajectory(_write(tmp_path, data))
    assert parsed.complete_count == 1 and parsed.next_actions == (parsed.next_actions[0], None)
    data["info"]["config"]["environment"] = {"cwd": ""}  # mini ran in its own process cwd: unknown
    assert parse_trajectory(_write(tmp_path, data)).cwd is None


def test_profile_checks_version_format_and_model_class(tmp_path: Path) -> None:
    adapter = MiniSweAgentAdapter()
    for version in ("1.17.5", "2.4.6"):
        parsed = parse_trajectory(FIXTURES / version / "basic" / "trajectory.traj.json")
        assert adapter.profile_for(parsed) == f"mini-swe-agent/{version}/companion-v1"
    data = json.loads((FIXTURES / "2.4.6" / "basic" / "trajectory.traj.json").read_text())
    data["info"]["config"]["model_type"] = "minisweagent.models.test_models.DeterministicModel"
    deterministic = parse_trajectory(_write(tmp_path, data))
    # the model class matters only to a continuation (issue 22): prepare-only and replay-only need no model
    assert adapter.profile_for(deterministic) == "mini-swe-agent/2.4.6/companion-v1"
    with pytest.raises(ReplayError) as caught:
        adapter.prepare_launch(deterministic, None)
    assert caught.value.kind is ErrorKind.UNSUPPORTED_VERSION and "DeterministicModel" in caught.value.message
    data["info"]["mini_version"] = "2.4.5"
    with pytest.raises(ReplayError) as caught:
        adapter.profile_for(parse_trajectory(_write(tmp_path, data)))
    assert "2.4.5 is not a verified version" in caught.value.message


def test_error_rules() -> None:
    assert is_error_v1("<returncode>1</returncode>\n<output>\n</output>")
    assert not is_error_v1("<returncode>0</returncode>\n<output>\n<returncode>1</returncode></output>")
    assert is_error_v1("The last command <command>sleep 9</command> timed out and has been killed.")
    assert not is_error_v1("Observation: {'output': '', 'returncode': 1}")  # no tag: the template is unknown
    assert is_error_v2({"returncode": 2}) and is_error_v2({"returncode": -1, "exception_info": "timed out"})
    assert not is_error_v2({"returncode": 0, "exception_info": ""}) and not is_error_v2(None)
