"""Which historical Claude Code calls can be re-run, which can only reuse their recorded observation."""

from __future__ import annotations

from forkpoint.core.model import CallPolicy, JsonObject, Observation

#: Tools forkpoint re-executes with Claude Code's own semantics and output text.
FRESH_TOOLS = frozenset({"Bash", "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "LS"})

_STALE_REASONS = {
    "Agent": "a sub-agent run is its own model conversation and cannot be re-executed",
    "Task": "a sub-agent run is its own model conversation and cannot be re-executed",
    "TaskOutput": "it reads the state of an earlier sub-agent or background task",
    "TaskCreate": "it edits the original session's task list",
    "TaskGet": "it reads the original session's task list",
    "TaskList": "it reads the original session's task list",
    "TaskUpdate": "it edits the original session's task list",
    "TaskStop": "it stops a task of the original session",
    "TodoWrite": "it edits the original session's todo list",
    "WebFetch": "web content changes over time",
    "WebSearch": "web search results change over time",
    "ToolSearch": "it reflects the original session's deferred tool registry",
    "Skill": "skills are loaded from the original machine's configuration",
}

ASYNC_LAUNCH_TOOLS = frozenset({"Agent", "Task"})
ASYNC_COLLECT_TOOLS = frozenset({"TaskOutput", "AgentOutputTool", "BashOutput"})


#: The result Claude Code made up on resume for a call whose result was never recorded (dangling tool_use).
INTERRUPTED_PREFIX = "[Tool call interrupted"


def classify(
    name: str, arguments: JsonObject, historical: Observation | None, version: str | None = None
) -> tuple[CallPolicy, str | None]:
    """Return the policy of one call and, when not fresh, the reason shown to the user."""
    if name == "Bash" and arguments.get("run_in_background") is True:
        return CallPolicy.REFUSED, "Bash with run_in_background cannot be replayed deterministically"
    if historical is not None and historical.is_error and historical.text.lstrip().startswith("<tool_use_error>"):
        return CallPolicy.STALE, "Claude Code rejected the original call before running it (<tool_use_error>)"
    if historical is not None and historical.is_error and historical.text.lstrip().startswith(INTERRUPTED_PREFIX):
        return CallPolicy.STALE, (
            "Claude Code never recorded this call's result (the session ended while it ran); the result is the "
            "'[Tool call interrupted…]' text Claude made up on resume, so whether the call took effect is unknown"
        )
    if name == "NotebookEdit":  # decided here, not by the executor after the run is allocated
        return CallPolicy.REFUSED, "forkpoint does not re-implement NotebookEdit; the workspace would miss its edit"
    if name == "Read":
        from forkpoint.adapters.claude_code.tool_media import classify_read  # base64/struct/decimal: only for Read

        reason = classify_read(arguments, historical, version)
        if reason is not None:
            return CallPolicy.STALE, reason
    listed = CallPolicy.listed(name, FRESH_TOOLS, _STALE_REASONS)
    if listed is not None:
        return listed
    if name.startswith("mcp__"):
        return CallPolicy.STALE, "MCP server tools are not available to forkpoint"
    return CallPolicy.STALE, f"forkpoint does not re-execute the tool {name!r}"


def is_async_launch(name: str, arguments: JsonObject) -> bool:
    return name in ASYNC_LAUNCH_TOOLS and arguments.get("run_in_background") is True
