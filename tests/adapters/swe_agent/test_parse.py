"""Parsing SWE-agent 1.1.0 .traj files: the constructed fixtures and hand-made edge cases."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.swe_agent import SweAgentAdapter
from forkpoint.adapters.swe_agent.parse import first_word, parse_traj, recorded_cwd
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import CallPolicy, Mode
from forkpoint.run.plan import select_boundary

FIXTURES = Path(__file__).parents[2] / "fixtures" / "swe_agent" / "1.1.0"


def fixture(scenario: str) -> dict[str, Any]:
    path = next((FIXTURES / scenario).glob("*.traj"))
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def write(tmp_path: Path, data: Any, name: str = "x.traj") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def test_shell_state_fixture() -> None:
    parsed = parse_traj(next((FIXTURES / "shell_state").glob("*.traj")))
    assert parsed.version == "1.1.0"
    assert parsed.cwd == "/tmp/forkpoint-rec-swe-agent/shell_state"
    assert parsed.session_id == "toy__shell_state-1"
    assert parsed.complete_count == 7
    assert [len(b.calls) for b in parsed.batches] == [1] * 7
    first = parsed.batches[0].calls[0]
    assert (first.call_id, first.name) == ("call_shell_state_01", "bash")
    assert first.arguments == {"action": "cat pkg/calc.py"}
    assert first.historical is not None
    assert first.historical.content == "OBSERVATION:\ndef add(a, b):\n    return a - b\n"
    # the cache_control processor's text parts are kept as the historical content shape
    sixth = parsed.batches[5].calls[0]
    assert sixth.historical is not None and isinstance(sixth.historical.content, list)
    submit = parsed.batches[6].calls[0]
    assert submit.policy is CallPolicy.REFUSED and "ends the SWE-agent run" in (submit.policy_reason or "")
    assert 7 in parsed.boundary_refusals and 6 not in parsed.boundary_refusals
    assert parsed.next_actions[0] is not None and parsed.next_actions[0].text == "Let me look at the file."
    assert parsed.next_actions[6] is not None and parsed.next_actions[6].tools == (("submit", {"action": "submit"}),)
    assert parsed.next_actions[7] is None
    assert SweAgentAdapter().profile_for(parsed) == "swe-agent/1.1.0/traj-v1"


def test_thought_action_fixture_has_no_tool_calls_and_refuses_bundle_commands(tmp_path: Path) -> None:
    parsed = parse_traj(next((FIXTURES / "thought_action").glob("*.traj")))
    assert [b.calls[0].call_id for b in parsed.batches] == [f"swe-agent-step-{i}" for i in range(1, 7)]
    editor = parsed.batches[5].calls[0]  # str_replace_editor is re-implemented now (issue 22 item 8)
    assert editor.policy is CallPolicy.FRESH and editor.policy_reason is None
    assert select_boundary(parsed, 6, Mode.REPLAY_ONLY, "p").after_step == 6
    # a bundle command forkpoint does not re-implement (the windowed bundle's `open`) is still refused
    data = fixture("thought_action")
    data["trajectory"][5]["action"] = "open data/small.txt"
    data["history"][-2]["action"] = "open data/small.txt"
    parsed = parse_traj(write(tmp_path, data))
    refused = parsed.batches[5].calls[0]
    assert refused.policy is CallPolicy.REFUSED and "tool-bundle command" in (refused.policy_reason or "")
    with pytest.raises(ReplayError) as caught:
        select_boundary(parsed, 6, Mode.REPLAY_ONLY, "p")
    assert caught.value.kind is ErrorKind.UNSUPPORTED_TOOL  # a tool, not a version (issue 22.7)
    assert select_boundary(parsed, 6, Mode.PREPARE_ONLY, "p").after_step == 6


def test_submit_step_cannot_end_a_prefix() -> None:
    parsed = parse_traj(next((FIXTURES / "shell_state").glob("*.traj")))
    with pytest.raises(ReplayError, match="ends the SWE-agent run"):
        select_boundary(parsed, 7, Mode.PREPARE_ONLY, "p")


@pytest.mark.parametrize(("data", "message"), [
    ([], "must be a JSON object"),
    ({"history": []}, "no 'trajectory'"),
    ({"trajectory": {}, "history": [], "replay_config": "{}"}, "must be a list of step objects"),
    ({"trajectory": [], "history": [1], "replay_config": "{}"}, "must be a list of message objects"),
    ({"trajectory": [], "history": [], "replay_config": "{not json"}, "not valid encoded JSON"),
    ({"trajectory": [], "history": [], "replay_config": "[1]"}, "not an object"),
])
def test_malformed_documents_are_trajectory_errors(tmp_path: Path, data: Any, message: str) -> None:
    with pytest.raises(ReplayError, match=message) as caught:
        parse_traj(write(tmp_path, data))
    assert caught.value.kind is ErrorKind.TRAJECTORY


def test_invalid_json_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ReplayError, match="not valid JSON"):
        parse_traj(write(tmp_path, "{"))
    with pytest.raises(ReplayError, match="cannot read"):
        parse_traj(tmp_path / "missing.traj")


def test_retry_and_shell_agents_are_unsupported(tmp_path: Path) -> None:
    data = fixture("shell_state")
    with pytest.raises(ReplayError, match="RetryAgent") as caught:
        parse_traj(write(tmp_path, {**data, "attempts": [data]}))
    assert caught.value.kind is ErrorKind.UNSUPPORTED_VERSION
    config = json.loads(data["replay_config"])
    config["agent"]["type"] = "retry"
    with pytest.raises(ReplayError, match="agent type 'retry'"):
        parse_traj(write(tmp_path, {**data, "replay_config": json.dumps(config)}))


def test_replay_config_may_be_an_object(tmp_path: Path) -> None:
    data = fixture("shell_state")
    parsed = parse_traj(write(tmp_path, {**data, "replay_config": json.loads(data["replay_config"])}))
    assert parsed.complete_count == 7


def test_older_trajectories_are_refused_by_version(tmp_path: Path) -> None:
    data = fixture("shell_state")
    data["info"].pop("swe_agent_version")
    for step in data["trajectory"]:
        step["messages"] = step.pop("query")
    parsed = parse_traj(write(tmp_path, data))
    with pytest.raises(ReplayError, match="not a verified version") as caught:
        SweAgentAdapter().profile_for(parsed)
    assert caught.value.kind is ErrorKind.UNSUPPORTED_VERSION
    data["info"]["swe_agent_version"] = "1.0.1"
    with pytest.raises(ReplayError, match=r"1\.0\.1"):
        SweAgentAdapter().profile_for(parse_traj(write(tmp_path, data)))


def test_a_trajectory_without_replay_config_is_readable_and_unverified(tmp_path: Path) -> None:
    """Issue 28: SWE-agent before 1.0 recorded no replay_config (nor a version): the structure is still read, with
    the default agent; its version is unverified and its tools re-run with 1.1.0's semantics."""
    data = fixture("shell_state")
    data.pop("replay_config")
    data["info"].pop("swe_agent_version")
    parsed = parse_traj(write(tmp_path, data))
    assert parsed.complete_count == 7 and any("no replay_config" in w for w in parsed.warnings)
    facts = SweAgentAdapter().version_facts(parsed)
    assert (facts.recorded, facts.status, facts.tool_version) == (None, "unverified", "1.1.0")


def test_a_missing_last_observation_makes_the_tail_incomplete(tmp_path: Path) -> None:
    data = fixture("shell_state")
    data["history"] = data["history"][:-1]  # the submit step's observation message was never written
    parsed = parse_traj(write(tmp_path, data))
    assert parsed.complete_count == 6 and parsed.incomplete_tail
    data["trajectory"] = data["trajectory"][:3]  # a crash between history and trajectory updates
    parsed = parse_traj(write(tmp_path, data))
    assert len(parsed.batches) == 3 and parsed.complete_count == 3


def test_demonstrations_and_requery_free_history(tmp_path: Path) -> None:
    data = fixture("shell_state")
    demo = [{"role": "assistant", "content": "demo", "action": "ls", "agent": "main", "is_demo": True,
             "message_type": "demonstration"},
            {"role": "user", "content": "demo out", "agent": "main", "is_demo": True,
             "message_type": "demonstration"}]
    data["history"][1:1] = demo
    parsed = parse_traj(write(tmp_path, data))
    assert parsed.complete_count == 7
    assert parsed.batches[0].calls[0].arguments == {"action": "cat pkg/calc.py"}


def test_step_without_action_is_refused(tmp_path: Path) -> None:
    data = fixture("shell_state")
    del data["trajectory"][1]["action"]
    with pytest.raises(ReplayError, match="step 2 has no action"):
        parse_traj(write(tmp_path, data))


def test_unrenderable_templates_refuse_every_call(tmp_path: Path) -> None:
    data = fixture("shell_state")
    config = json.loads(data["replay_config"])
    config["agent"]["templates"]["next_step_template"] = "{% if observation %}{{observation}}{% endif %}"
    parsed = parse_traj(write(tmp_path, {**data, "replay_config": json.dumps(config)}))
    call = parsed.batches[0].calls[0]
    assert call.policy is CallPolicy.REFUSED and "next_step_template" in (call.policy_reason or "")


def test_bundle_state_keys_are_refused(tmp_path: Path) -> None:
    data = fixture("shell_state")
    data["trajectory"][0]["state"] = {"working_dir": "/x", "open_file": "/x/a.py"}
    parsed = parse_traj(write(tmp_path, data))
    assert parsed.batches[0].calls[0].policy is CallPolicy.REFUSED
    assert "open_file" in (parsed.batches[0].calls[0].policy_reason or "")


@pytest.mark.parametrize(("repo", "cwd"), [
    ({"type": "preexisting", "repo_name": "testbed"}, "/testbed"),
    ({"type": "local", "path": "/home/me/src/calc/"}, "/calc"),
    ({"type": "github", "github_url": "https://github.com/owner/repo.git"}, "/owner__repo"),
    (None, None),
])
def test_recorded_cwd(repo: Any, cwd: str | None) -> None:
    assert recorded_cwd({"env": {"repo": copy.deepcopy(repo)}}) == cwd


@pytest.mark.parametrize(("action", "word"), [
    ("ls -la", "ls"),
    ("  \n", ""),
    ("'str_replace_editor' view /x", "str_replace_editor"),
    ("python -c 'print(1)'\nmore", "python"),
    ("cat <<'EOF' > f.py\n" + "x = 'unbalanced\n" * 1000 + "EOF", "cat"),
    ("echo \"it's", "echo"),  # an unbalanced quote after the first word does not matter
    ("\"unterminated", "\"unterminated"),  # inside the first word: the raw word
    ("# a comment", "#"),
])
def test_first_word_is_the_command_name_the_shell_sees(action: str, word: str) -> None:
    assert first_word(action) == word


def test_editor_fixture_re_runs_the_default_bundle_tools() -> None:
    parsed = parse_traj(next((FIXTURES / "editor").glob("*.traj")))
    assert parsed.complete_count == 19
    names = [b.calls[0].name for b in parsed.batches]
    assert names.count("str_replace_editor") == 15 and names[-2:] == ["submit", "submit"]
    assert all(b.calls[0].policy is CallPolicy.FRESH for b in parsed.batches[:18])
    review, final = parsed.batches[17].calls[0], parsed.batches[18].calls[0]
    assert review.policy is CallPolicy.FRESH  # a review stage: the run went on
    assert final.policy is CallPolicy.REFUSED and "ends the SWE-agent run" in (final.policy_reason or "")
    assert 19 in parsed.boundary_refusals and 18 not in parsed.boundary_refusals
    native = parsed.native
    assert native.bundle_commands == frozenset({"str_replace_editor", "submit"})
    assert native.registry_variables["USE_FILEMAP"] == "true"


def test_inspect_never_offers_the_final_submit_as_a_boundary() -> None:
    from forkpoint.run.inspection import describe

    for scenario, last in (("shell_state", 6), ("editor", 18), ("timeout", 3)):
        description = describe(next((FIXTURES / scenario).glob("*.traj")), "swe-agent")
        assert description["after_step_range"] == [1, last], scenario


def test_null_replay_config_says_so(tmp_path: Path) -> None:
    data = fixture("shell_state")
    with pytest.raises(ReplayError, match="replay_config is null") as caught:
        parse_traj(write(tmp_path, {**data, "replay_config": None}))
    assert caught.value.kind is ErrorKind.TRAJECTORY


def _editor_with(tmp_path: Path, step: int, **changes: Any) -> Any:
    data = fixture("editor")
    config = json.loads(data["replay_config"])
    for key, value in changes.pop("registry", {}).items():
        config["agent"]["tools"]["registry_variables"][key] = value
    if "bundles" in changes:
        config["agent"]["tools"]["bundles"] = changes.pop("bundles")
    data["replay_config"] = json.dumps(config)
    data["trajectory"][step].update(changes)
    return parse_traj(write(tmp_path, data)).batches[step].calls[0]


def test_calls_the_re_implementation_cannot_reproduce_stay_stale(tmp_path: Path) -> None:
    crashed = _editor_with(tmp_path, 1, observation="Traceback (most recent call last):\n  File \"/root/tools/...")
    assert crashed.policy is CallPolicy.STALE and "traceback" in (crashed.policy_reason or "")
    filemap = _editor_with(tmp_path, 1, observation="<NOTE>This file is too large to display entirely. Showing "
                                                    "abbreviated version. Please use ...")
    assert filemap.policy is CallPolicy.STALE and "filemap" in (filemap.policy_reason or "")
    linted = _editor_with(tmp_path, 7, registry={"USE_LINTER": "true"})
    assert linted.policy is CallPolicy.STALE and "flake8" in (linted.policy_reason or "")
    viewed = _editor_with(tmp_path, 1, registry={"USE_LINTER": "true"})  # a view runs no linter
    assert viewed.policy is CallPolicy.FRESH


def test_bundle_tools_exist_only_when_their_bundle_was_loaded(tmp_path: Path) -> None:
    bundles = [{"path": "/root/tools/registry"}, {"path": "/root/tools/submit"}]
    editor = _editor_with(tmp_path, 1, bundles=bundles)
    assert editor.policy is CallPolicy.REFUSED and "tool-bundle command" in (editor.policy_reason or "")
    review = _editor_with(tmp_path, 17, bundles=bundles)  # the plain submit bundle has no review stage
    assert review.policy is CallPolicy.REFUSED and "review_on_submit_m" in (review.policy_reason or "")


def test_a_last_submit_that_did_not_submit_is_a_review_stage(tmp_path: Path) -> None:
    data = fixture("editor")
    data["trajectory"], data["history"] = data["trajectory"][:18], data["history"][:-2]
    data["info"].update(exit_status="exit_cost", submission=None)
    parsed = parse_traj(write(tmp_path, data))
    assert parsed.complete_count == 18 and not parsed.boundary_refusals
    assert parsed.batches[17].calls[0].policy is CallPolicy.FRESH


def test_an_autosubmitted_last_step_ends_the_run(tmp_path: Path) -> None:
    """After an error (e.g. the cost limit) SWE-agent appends a step it wrote itself: no action, observation
    "Exited (autosubmitted)". It is no replayable call and no boundary."""
    data = fixture("timeout")
    data["trajectory"][-1].update(action="", observation="Exited (autosubmitted)")
    data["history"][-2]["action"] = ""
    data["info"].update(exit_status="submitted (exit_cost)", submission="diff --git a/x b/x\n")
    parsed = parse_traj(write(tmp_path, data))
    last = parsed.batches[-1].calls[0]
    assert last.policy is CallPolicy.REFUSED and "ends the SWE-agent run" in (last.policy_reason or "")
    assert "step 3 (no action) ends the SWE-agent run" in parsed.boundary_refusals[3]
    assert 2 not in parsed.boundary_refusals


def test_requeried_attempts_are_no_calls_and_steps_follow_history() -> None:
    """forward_with_handling's requeried attempts (format error, blocked ``make``, lint-failed edit) sit in
    ``trajectory`` only: the step is the accepted entry the history item repeats, not the next trajectory entry."""
    parsed = parse_traj(next((FIXTURES / "requery").glob("*.traj")))
    assert parsed.complete_count == 3
    assert [b.calls[0].arguments["action"] for b in parsed.batches] == [
        'open "pkg/calc.py"', "sed -i 's/a - b/a + b/' pkg/calc.py && cat pkg/calc.py", "ls"]
    assert [b.locator for b in parsed.batches] == ["trajectory[0]", "trajectory[4]", "trajectory[5]"]
    assert [b.native.requeried for b in parsed.batches] == [(), (1, 2, 3), ()]
    assert [c.policy for b in parsed.batches for c in b.calls] == [CallPolicy.FRESH] * 3
    assert parsed.next_actions[1] is not None and parsed.next_actions[1].tools == (
        ("bash", {"action": "sed -i 's/a - b/a + b/' pkg/calc.py && cat pkg/calc.py"}),)
    assert any("3 requeried attempt(s) (trajectory[1], trajectory[2], trajectory[3])" in w for w in parsed.warnings)


def test_a_requery_before_an_autosubmission_is_told_apart_by_its_turn(tmp_path: Path) -> None:
    """exit_format: the last requeried attempt is followed by the autosubmission step, whose empty query does not
    show the requery pair; the history item's output names the accepted entry."""
    data = fixture("requery")
    data["trajectory"].append({**data["trajectory"][3], "action": "", "response": "oops", "thought": "oops",
                               "observation": "", "state": {}, "query": data["trajectory"][5]["query"]})
    message = "Exit due to repeated format/blocklist/bash syntax errors"
    data["trajectory"].append({"action": "", "observation": "Exited (autosubmitted)", "response": message,
                               "thought": message, "execution_time": 0.0, "state": {}, "query": [],
                               "extra_info": {}})
    data["history"] += [{"role": "assistant", "content": message, "thought": message, "action": "", "agent": "main",
                         "tool_calls": None, "message_type": "action"},
                        {"role": "user", "content": "OBSERVATION:\nExited (autosubmitted)", "agent": "main",
                         "message_type": "observation"}]
    data["info"]["exit_status"] = "exit_format"
    parsed = parse_traj(write(tmp_path, data))
    assert [b.locator for b in parsed.batches] == ["trajectory[0]", "trajectory[4]", "trajectory[5]",
                                                   "trajectory[7]"]
    assert parsed.batches[3].native.requeried == (6,)
    assert 4 in parsed.boundary_refusals and 3 not in parsed.boundary_refusals
