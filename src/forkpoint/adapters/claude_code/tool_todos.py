"""Claude Code's TodoWrite, re-run: its result is a function of the input and the run's earlier TodoWrite calls.

Measured on the real 2.0.27 binary (scripted model; the public 2.0.14/2.0.26 recordings agree): the content is
one constant text; ``toolUseResult`` is ``{oldTodos, newTodos}`` where ``newTodos`` is the input list and
``oldTodos`` the list the previous call of the same context (the session, or one sub-agent) left; a list whose
todos are all completed (or an empty one) is stored as ``[]``, so the next call's ``oldTodos`` is ``[]``. The
verified 2.1.x versions disable TodoWrite (their result is a ``<tool_use_error>``, which stays stale).
"""

from __future__ import annotations

from typing import Any

from forkpoint.adapters.claude_code.tool_profile import ToolOutcome

TODO_TEXT = (
    "Todos have been modified successfully. Ensure that you continue to use the todo list to track your progress. "
    "Please proceed with the current tasks if applicable"
)
_STATUSES = frozenset({"pending", "in_progress", "completed"})


def todo_input_problem(arguments: dict[str, Any]) -> str | None:
    """Why the input is not one 2.0.x accepts as given (its strict schema), else None."""
    todos = arguments.get("todos")
    if set(arguments) != {"todos"} or not isinstance(todos, list):
        return "TodoWrite input is not exactly {todos: [...]}"
    for todo in todos:
        if not isinstance(todo, dict) or set(todo) - {"content", "status", "activeForm"}:
            return "a todo has fields TodoWrite's schema does not list"
        if todo.get("status") not in _STATUSES or not all(
                isinstance(todo.get(key), str) and todo.get(key) for key in ("content", "activeForm")):
            return "a todo has no content/activeForm text or an unknown status"
    return None


class TodoLists:
    """The todo list of each context of one run (None: the session's own; else a sub-agent's id)."""

    def __init__(self) -> None:
        self._lists: dict[str | None, list[Any]] = {}

    def write(self, agent: str | None, arguments: dict[str, Any]) -> ToolOutcome:
        todos = arguments.get("todos")
        todos = list(todos) if isinstance(todos, list) else []
        old = self._lists.get(agent, [])
        done = all(isinstance(t, dict) and t.get("status") == "completed" for t in todos)
        self._lists[agent] = [] if done else todos
        return ToolOutcome(TODO_TEXT, False, {"oldTodos": old, "newTodos": todos})
