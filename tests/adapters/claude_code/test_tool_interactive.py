"""AskUserQuestion / ExitPlanMode re-run from the recorded answer: exact on the real binaries' SDK-mode fixtures
(2.1.220, 2.1.332) and on public 2.0.x recordings (read in place, never copied); every other shape stays stale."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.adapters.claude_code.policy import INTERACTIVE_TOOLS, classify
from forkpoint.adapters.claude_code.tool_interactive import ANSWER_FROM_RECORDING
from forkpoint.core.model import CallPolicy, Observation, RunContext

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "claude_code"
WILD = Path("/work/shared/wild-dev/claude-code")
QUESTION = {"question": "Which one?", "header": "Pick", "multiSelect": False,
            "options": [{"label": "X", "description": "x"}, {"label": "Y", "description": "y"}]}


def _recorded(path: Path) -> dict[str, Any]:
    """tool_use id -> the recorded toolUseResult of every result line."""
    out: dict[str, Any] = {}
    for raw in path.read_text("utf-8").splitlines():
        line = json.loads(raw) if raw.strip() else {}
        content = line.get("message", {}).get("content") if isinstance(line.get("message"), dict) else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                out[block["tool_use_id"]] = line.get("toolUseResult")
    return out


@pytest.mark.parametrize("source", [FIXTURES / "2.1.220" / "interactive_tools" / "session.jsonl",
                                    FIXTURES / "2.1.332" / "interactive_tools" / "session.jsonl",
                                    WILD / "agentcmd-2.0.26.jsonl"], ids=lambda path: path.parent.name + path.name)
def test_recorded_answers_re_run_exactly(source: Path, tmp_path: Path, workspace: Path, session_id: str) -> None:
    """Every AskUserQuestion / ExitPlanMode of the recording is fresh (no flag) and its re-run result is the recorded
    text and toolUseResult, marked ``answer_from_recording``."""
    from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor

    if not source.is_file():
        pytest.skip(f"{source} is not on this machine")
    parsed = parse_session(source)
    calls = [call for batch in parsed.batches for call in batch.calls if call.name in INTERACTIVE_TOOLS]
    assert {call.name for call in calls} == INTERACTIVE_TOOLS
    recorded = _recorded(source)
    executor = ClaudeToolExecutor(RunContext(workspace, tmp_path / "state", tmp_path / "out"), "2.1.332",
                                  session_id, tmp_path / "home" / ".claude", recorded=parsed.version)
    try:
        for call in calls:
            assert (call.policy, call.policy_reason) == (CallPolicy.FRESH, None), call.call_id
            fresh = executor.run(call)
            assert call.historical is not None
            assert (fresh.content, fresh.is_error) == (call.historical.content, call.historical.is_error)
            assert fresh.native == recorded[call.call_id]
            assert fresh.note == ANSWER_FROM_RECORDING and not fresh.stale_reused and fresh.reused is None
    finally:
        executor.close()


def test_formats_follow_each_line() -> None:
    """2.0.x: answers in their own order, 'the user's answers'; 2.1.x: question order, and 'The user answered'
    (a caution) when an answer is not one of the options; a multi-select answer is its labels joined by ', '."""
    two = [QUESTION, {**QUESTION, "question": "And?", "multiSelect": True}]
    answers = {"And?": "X, Y", "Which one?": "Y"}
    old = 'User has answered your questions: "And?"="X, Y", "Which one?"="Y". You can now continue with the user\'s ' \
          'answers in mind.'
    new = 'Your questions have been answered: "Which one?"="Y", "And?"="X, Y". You can now continue with these ' \
          'answers in mind.'
    for version, text in (("2.0.26", old), ("2.1.220", new)):
        result = {"questions": two, "answers": answers}
        assert classify("AskUserQuestion", {"questions": two}, Observation(text), version, result) == (
            CallPolicy.FRESH, None)
    free = {"questions": [QUESTION], "answers": {"Which one?": "neither"}}
    caution = ('The user answered: "Which one?"="neither". Read the answers carefully \u2014 they may request '
               'clarification, changes, or that you not proceed \u2014 and follow what they actually say.')
    assert classify("AskUserQuestion", {"questions": [QUESTION]}, Observation(caution), "2.1.332", free)[0] is \
        CallPolicy.FRESH


@pytest.mark.parametrize(("arguments", "result", "text", "why"), [
    ({"questions": [QUESTION]}, None, "Your questions have been answered: ...", "structured answers"),
    ({"questions": [QUESTION]}, {"questions": [QUESTION], "answers": {"Which one?": "X"},
                                 "annotations": {"Which one?": {"notes": "n"}}}, "x", "annotations"),
    ({"questions": [{**QUESTION, "question": "Other?"}]}, {"questions": [QUESTION], "answers": {}}, "x",
     "not the call's input"),
    ({"questions": [QUESTION]}, {"questions": [QUESTION], "answers": {"Which one?": "X"}},
     'Your questions have been answered: "Which one?"="Y". You can now continue with these answers in mind.',
     "not the text forkpoint formats"),
    ({"questions": [{**QUESTION, "question": "constructor"}]},
     {"questions": [{**QUESTION, "question": "constructor"}], "answers": {"constructor": "X"}}, "x",
     "JavaScript object property"),
])
def test_answers_not_reproduced_stay_stale(arguments: dict[str, Any], result: Any, text: str, why: str) -> None:
    policy, reason = classify("AskUserQuestion", arguments, Observation(text), "2.1.332", result)
    assert policy is CallPolicy.STALE and why in (reason or "")


def test_a_plan_saved_under_a_random_name_stays_stale() -> None:
    approved = ("User has approved your plan. You can now start coding. Start with updating your todo list if "
                "applicable\n\nYour plan has been saved to: /home/u/.claude/plans/mellow-twirling-floyd.md\n...")
    policy, reason = classify("ExitPlanMode", {"plan": "p"}, Observation(approved), "2.1.332", {"plan": "p"})
    assert policy is CallPolicy.STALE and "random" in (reason or "")
    rejected = ("The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file "
                "edit, the new_string was NOT written to the file). STOP what you are doing and wait for the user to "
                "tell you how to proceed.")
    assert classify("ExitPlanMode", {"plan": "p"}, Observation(rejected, True), "2.0.26", "Error: " + rejected) == (
        CallPolicy.FRESH, None)
