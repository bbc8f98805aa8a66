"""Claude Code's AskUserQuestion and ExitPlanMode, re-run from the answer the recording holds.

Their result is a person's answer, but the recording keeps it: AskUserQuestion's ``toolUseResult`` carries the
``answers`` and the binary formats the result text from the input's ``questions`` and those answers; ExitPlanMode's
approval or rejection is a constant text. Templates read from each binary's JS (``mapToolResultToToolResultBlockParam``)
and checked against real recordings: 2.0.x ``User has answered your questions: "Q"="A", ... You can now continue with
the user's answers in mind.`` (``Object.entries(answers)`` order; 2.0.26/2.0.29 public recordings); 2.1.x ``Your
questions have been answered: ...`` in question order, or ``The user answered: ...`` when an answer is not one of the
options (2.1.220 / 2.1.332 fixtures ``interactive_tools``). A call is re-run only when this reproduction equals its
recorded result exactly (``policy``); every other shape (notes, previews, free-text responses, an idle timeout, a plan
saved under a random file name) stays stale with its reason. The re-run observation carries the quality reason
``answer_from_recording``: the answer is the original person's, not a new one.
"""

from __future__ import annotations

import re
from typing import Any

from forkpoint.adapters.claude_code.tool_profile import ToolOutcome

ANSWER_FROM_RECORDING = "answer_from_recording"

#: 2.1.x's placeholder answer of a question answered only with notes (``iAo`` / ``Lhr`` in the JS)
_NOTES_ONLY = "(notes only)"
#: keys JS ``Object.entries`` orders first (array indices), and names a plain ``t[q]`` lookup finds on the prototype
_INDEX_KEY = re.compile(r"^(0|[1-9][0-9]{0,9})$")
_PROTOTYPE_NAMES = frozenset({"constructor", "__proto__", "toString", "toLocaleString", "valueOf", "hasOwnProperty",
                              "isPrototypeOf", "propertyIsEnumerable", "__defineGetter__", "__defineSetter__",
                              "__lookupGetter__", "__lookupSetter__"})
_PLAIN_RESULT = frozenset({"questions", "answers"})

#: ExitPlanMode's constant results (both lines' JS): approved on 2.0.x; approved with no plan text on 2.1.x (the
#: plan with text names its randomly named plan file, which stays stale); a person's rejection (any version)
PLAN_CONSTANTS = frozenset({
    "User has approved your plan. You can now start coding. Start with updating your todo list if applicable",
    "User has approved exiting plan mode. You can now proceed.",
    "The user doesn't want to proceed with this tool use. The tool use was rejected (eg. if it was a file edit, the "
    "new_string was NOT written to the file). STOP what you are doing and wait for the user to tell you how to "
    "proceed.",
})


def _old_line(version: str) -> bool:
    return version.startswith("2.0.") or version.startswith("1.")


def _answers_text(questions: list[Any], answers: dict[str, Any], version: str) -> str:
    """The result text ``version`` formats, or raise ValueError with why it cannot be reproduced."""
    if _old_line(version):
        if any(_INDEX_KEY.match(key) for key in answers):
            raise ValueError("an answered question's text is a number (JavaScript orders such keys first)")
        joined = ", ".join(f'"{key}"="{value}"' for key, value in answers.items())
        return f"User has answered your questions: {joined}. You can now continue with the user's answers in mind."
    parts: list[str] = []
    for question in questions:
        text = question["question"]
        answer = answers.get(text)
        if answer and answer != _NOTES_ONLY:
            parts.append(f'"{text}"="{answer}"')
    joined = ", ".join(parts)
    if not joined:
        return "The user did not answer the questions."
    if all(_from_options(question, answers.get(question["question"])) for question in questions):
        return f"Your questions have been answered: {joined}. You can now continue with these answers in mind."
    return (f"The user answered: {joined}. Read the answers carefully \u2014 they may request clarification, "
            f"changes, or that you not proceed \u2014 and follow what they actually say.")


def _from_options(question: dict[str, Any], answer: str | None) -> bool:
    labels = {option.get("label") for option in question["options"]}
    if not answer or answer == _NOTES_ONLY or answer in labels:
        return True
    if question.get("multiSelect") is not True:
        return False
    picked = answer.split(", ")
    return len(picked) > 1 and all(label in labels for label in picked)


def ask_outcome(arguments: dict[str, Any], recorded: Any, version: str | None) -> ToolOutcome | str:
    """AskUserQuestion's result from the recorded answers, or why it cannot be reproduced."""
    if version is None:
        return "the recording names no single Claude Code version, so the answer's text format is unknown"
    if not isinstance(recorded, dict) or not isinstance(recorded.get("answers"), dict):
        return "the recording does not hold the structured answers (toolUseResult.answers)"
    if set(recorded) - _PLAIN_RESULT:
        extra = ", ".join(sorted(set(recorded) - _PLAIN_RESULT))
        return f"the answer carries {extra} (notes, a free-text response or an idle timeout): not reproduced"
    questions = arguments.get("questions")
    if set(arguments) != {"questions"} or not isinstance(questions, list) or recorded.get("questions") != questions:
        return "the recorded questions are not the call's input questions"
    answers: dict[str, Any] = recorded["answers"]
    for question in questions:
        if (not isinstance(question, dict) or not isinstance(question.get("question"), str)
                or not isinstance(question.get("options"), list) or "kind" in question
                or not all(isinstance(option, dict) for option in question["options"])):
            return "a question is not a plain multiple-choice question"
        if question["question"] in _PROTOTYPE_NAMES:
            return "a question's text names a JavaScript object property"
    if not all(isinstance(value, str) for value in answers.values()):
        return "an answer is not a string"
    try:
        text = _answers_text(questions, answers, version)
    except ValueError as error:
        return str(error)
    return ToolOutcome(text, False, {"questions": questions, "answers": answers})


def plan_outcome(recorded_text: str, recorded: Any) -> ToolOutcome | str:
    """ExitPlanMode's constant approval or rejection with the recorded ``toolUseResult``, or why not."""
    if recorded_text not in PLAN_CONSTANTS:
        return ("the plan's approval names its randomly named plan file (or is not a known constant): "
                "the recorded answer is not re-runnable")
    rejected = recorded_text.startswith("The user doesn't want")
    return ToolOutcome(recorded_text, rejected, recorded)


def interactive_outcome(name: str, arguments: dict[str, Any], recorded_text: str, recorded: Any,
                        version: str | None) -> ToolOutcome | str:
    """The re-run result of an interactive call from what the recording holds, or why it stays stale."""
    if name == "AskUserQuestion":
        return ask_outcome(arguments, recorded, version)
    return plan_outcome(recorded_text, recorded)
