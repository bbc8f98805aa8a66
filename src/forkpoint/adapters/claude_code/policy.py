"""Which historical Claude Code calls can be re-run, which can only reuse their recorded observation."""

from __future__ import annotations

from typing import Any

from forkpoint.core.model import CallPolicy, JsonObject, Observation

#: Claude Code's task tools (tool_tasks.TASK_TOOLS; a test keeps the two equal)
_TASK_TOOLS = frozenset({"TaskCreate", "TaskGet", "TaskList", "TaskUpdate"})

#: Tools forkpoint re-executes with Claude Code's own semantics and output text.
FRESH_TOOLS = frozenset({"Bash", "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "LS", "NotebookEdit",
                         "TaskCreate", "TaskGet", "TaskList", "TaskUpdate", "EnterPlanMode"})

#: Measured on 2.1.220 / 2.1.332 (scripted model): plain ``-p`` runs disable these (``<tool_use_error>`` "No such
#: tool available"); in SDK mode / interactively their result is what a person answered or approved.
_INTERACTIVE_REASON = "its result is what a person answered in the original session"

_STALE_REASONS = {
    # a completed foreground sub-agent whose transcript is found is REUSED instead (subagents.py)
    "Agent": "a sub-agent run is its own model conversation and cannot be re-executed",
    "Task": "a sub-agent run is its own model conversation and cannot be re-executed",
    "TaskOutput": "it reads the state of an earlier sub-agent or background task",
    "TaskStop": "it stops a background task of the original session",
    "TodoWrite": "the recorded result is not TodoWrite's constant success text (2.1.220/2.1.332 disable TodoWrite "
                 "in every mode, measured: -p and SDK); forkpoint re-runs it where the binary ran it (2.0.x)",
    # re-run from the recorded answer when forkpoint reproduces its text exactly (tool_interactive), else stale
    "ExitPlanMode": f"the plan is approved or rejected by a person (and saved under a random file name): "
                    f"{_INTERACTIVE_REASON}",
    "AskUserQuestion": f"the answer was given by a person: {_INTERACTIVE_REASON}",
    "WebFetch": "web content changes over time",
    "WebSearch": "web search results change over time",
    "ToolSearch": "it reflects the original session's deferred tool registry",
    "Skill": "skills are loaded from the original machine's configuration and the binary's built-in set, and the "
             "skill's instructions enter the conversation as their own message",
}

#: re-run from the answer the recording holds when its text is reproduced exactly (tool_interactive)
INTERACTIVE_TOOLS = frozenset({"AskUserQuestion", "ExitPlanMode"})
ASYNC_LAUNCH_TOOLS = frozenset({"Agent", "Task"})
ASYNC_COLLECT_TOOLS = frozenset({"TaskOutput", "AgentOutputTool", "BashOutput"})


#: The result Claude Code made up on resume for a call whose result was never recorded (dangling tool_use).
INTERRUPTED_PREFIX = "[Tool call interrupted"


def classify(
    name: str, arguments: JsonObject, historical: Observation | None, version: str | None = None,
    recorded: Any = None,
) -> tuple[CallPolicy, str | None]:
    """Return the policy of one call and, when not fresh, the reason shown to the user (``recorded``: the call's
    recorded ``toolUseResult``, which holds an interactive call's answer)."""
    if name == "Bash" and arguments.get("run_in_background") is True:
        return CallPolicy.REFUSED, "Bash with run_in_background cannot be replayed deterministically"
    if (historical is not None and historical.is_error and historical.text.lstrip().startswith("<tool_use_error>")
            and not (name == "Read" and historical.text.startswith("<tool_use_error>File does not exist."))):
        # (2.0.x answers a Read of a missing file with a <tool_use_error>: a function of the workspace, re-run)
        return CallPolicy.STALE, "Claude Code rejected the original call before running it (<tool_use_error>)"
    if historical is not None and historical.is_error and historical.text.lstrip().startswith(INTERRUPTED_PREFIX):
        return CallPolicy.STALE, (
            "Claude Code never recorded this call's result (the session ended while it ran); the result is the "
            "'[Tool call interrupted…]' text Claude made up on resume, so whether the call took effect is unknown"
        )
    if name == "EnterPlanMode" and historical is not None:
        from forkpoint.adapters.claude_code.tool_plan import PLAN_MODE_TEXT  # the executor's modules load lazily

        if historical.text != PLAN_MODE_TEXT:
            return CallPolicy.STALE, (
                "EnterPlanMode did not give its constant result (a person declined plan mode, or Claude refused "
                "it): the recorded answer is not re-runnable")
    if name == "TodoWrite" and historical is not None and not historical.is_error:
        from forkpoint.adapters.claude_code.tool_todos import TODO_TEXT, todo_input_problem

        problem = todo_input_problem(arguments)
        if historical.text == TODO_TEXT and problem is None:
            return CallPolicy.FRESH, None
        if problem is not None:
            return CallPolicy.STALE, f"{problem}: Claude Code coerces such input, forkpoint does not re-run it"
    if name in INTERACTIVE_TOOLS and historical is not None:
        return _interactive(name, arguments, historical, version, recorded)
    if name in _TASK_TOOLS:
        from forkpoint.adapters.claude_code.tool_tasks import task_input_problem

        problem = task_input_problem(name, arguments)
        if problem is not None:
            return CallPolicy.STALE, f"{problem}: Claude Code coerces such input, forkpoint does not re-run it"
    if name == "Read":
        from forkpoint.adapters.claude_code.tool_media import classify_read  # base64/struct/decimal: only for Read

        reason = classify_read(arguments, historical, version)
        if reason is not None:
            return CallPolicy.STALE, reason
    listed = CallPolicy.listed(name, FRESH_TOOLS, _STALE_REASONS)
    if listed is not None:
        return listed
    tool = _mcp_name(name)
    if tool is not None:
        server = tool[0]
        return CallPolicy.STALE, (f"{MCP_REASON} {server!r} of the original session (--mcp-config FILE re-runs it "
                                  f"against your server; if the tool is read-only: --reuse-observations "
                                  f"'mcp__{server}__*')")
    return CallPolicy.STALE, f"forkpoint does not re-execute the tool {name!r}"


def _interactive(name: str, arguments: JsonObject, historical: Observation, version: str | None,
                 recorded: Any) -> tuple[CallPolicy, str | None]:
    """Fresh when forkpoint reproduces the recorded result exactly from the recorded answer, else stale (why)."""
    from forkpoint.adapters.claude_code.tool_interactive import interactive_outcome

    if not isinstance(historical.content, str):
        return CallPolicy.STALE, f"{_STALE_REASONS[name]} (its recorded result is not plain text)"
    outcome = interactive_outcome(name, dict(arguments), historical.content, recorded, version)
    if isinstance(outcome, str):
        return CallPolicy.STALE, f"{_STALE_REASONS[name]}; not re-run from the recording: {outcome}"
    if outcome.content != historical.content or outcome.is_error != historical.is_error:
        return CallPolicy.STALE, (f"{_STALE_REASONS[name]}; the recorded result is not the text forkpoint formats "
                                  f"from the recorded answer for Claude Code {version}")
    return CallPolicy.FRESH, None


MCP_REASON = "its answer came from the MCP server"


def _mcp_name(name: str) -> tuple[str, str] | None:
    """(server, tool) of Claude's ``mcp__<server>__<tool>`` name, else None."""
    parts = name.split("__", 2)
    if len(parts) != 3 or parts[0] != "mcp" or not parts[1] or not parts[2]:
        return None
    return parts[1], parts[2]


def mcp_tool(name: str, reason: str | None) -> tuple[str, str] | None:
    """(server, tool) of a call that is stale only because its server is not run: ``--mcp-config`` may re-run it
    (an MCP call Claude rejected before running it keeps its own reason and stays stale)."""
    return _mcp_name(name) if reason is not None and reason.startswith(MCP_REASON) else None


def is_async_launch(name: str, arguments: JsonObject) -> bool:
    return name in ASYNC_LAUNCH_TOOLS and arguments.get("run_in_background") is True
