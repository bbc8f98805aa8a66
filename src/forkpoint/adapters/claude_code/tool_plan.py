"""Claude Code's EnterPlanMode: a constant observation, re-run (not stale).

Measured on both verified versions in SDK mode (``tests/fixtures/claude_code/<version>/interactive_tools``; a plain
``-p`` run disables the tool): the result is the same text whatever the session's state, and ``toolUseResult`` is
``{"message": <its first sentence>}``. Entering plan mode changes what Claude lets later calls do; those calls carry
their own recorded results (a refusal by Claude is a ``<tool_use_error>``, stale), so nothing is lost by re-running
this one. Its companions carry a person's answer (and ExitPlanMode may name a randomly named plan file): they re-run
from the answer the recording holds when their text is reproduced exactly, else stay stale (``tool_interactive``).
"""

from __future__ import annotations

from typing import Any

from forkpoint.adapters.claude_code.tool_profile import ToolOutcome
from forkpoint.core.errors import ErrorKind, ReplayError

ENTERED = "Entered plan mode. You should now focus on exploring the codebase and designing an implementation approach."
PLAN_MODE_TEXT = ENTERED + """

In plan mode, you should:
1. Thoroughly explore the codebase to understand existing patterns
2. Identify similar features and architectural approaches
3. Consider multiple approaches and their trade-offs
4. Use AskUserQuestion if you need to clarify the approach
5. Design a concrete implementation strategy
6. When ready, use ExitPlanMode to present your plan for approval

Remember: DO NOT write or edit any files yet. This is a read-only exploration and planning phase."""


def enter_plan_mode(arguments: dict[str, Any]) -> ToolOutcome:
    if arguments:
        raise ReplayError(ErrorKind.EXECUTOR, "EnterPlanMode takes no input; Claude Code would reject this call",
                          before_effect=True)
    return ToolOutcome(PLAN_MODE_TEXT, False, {"message": ENTERED})
