"""What a run's journal facts mean for a next run (pure): which tool calls have unknown effects, which ran.

A call is resolved only by a ``tool_finished`` followed by a terminal run receipt (``run_finished`` or
``run_failed``); anything else after a ``tool_started`` leaves its effects unknown (ambiguous_execution). The rules
are kept apart from the journal file (``forkpoint.run.journal``) because the engine and ``forkpoint batch`` also apply
them to records they read themselves.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

_TERMINAL_EVENTS: Final = frozenset({"run_finished", "run_failed"})


def find_ambiguous(events: Iterable[Mapping[str, Any]]) -> str | None:
    """The call id to name for unknown effects, or None; pure and total.

    A call is resolved only by a ``tool_finished`` followed by a terminal run receipt (``run_finished`` or
    ``run_failed``): a finished call whose run never ended may belong to a batch that was cut short, and an
    unfinished start stays ambiguous forever, whatever comes after it. The call named is the lexicographically
    first one that started without finishing — the one whose effects are really unknown — and only when there is
    none, the first finished call of the unended run. Malformed call ids are kept (as a stable text form) rather
    than skipped, so a damaged fact fails closed.
    """
    found = _unresolved(events)
    return found[0] if found is not None else None


def describe_ambiguous(events: Iterable[Mapping[str, Any]]) -> str | None:
    """Why ``events`` leave effects unknown, as a phrase naming the call (see :func:`find_ambiguous`), or None."""
    found = _unresolved(events)
    if found is None:
        return None
    call_id, finished = found
    if finished:
        return (f'tool call "{call_id}" that finished, but its run never recorded its end (its batch may have been '
                "cut short)")
    return f'tool call "{call_id}" that started but has no recorded outcome'


def _unresolved(events: Iterable[Mapping[str, Any]]) -> tuple[str, bool] | None:
    """(call id, whether it finished) of the call :func:`find_ambiguous` names."""
    started: set[str] = set()
    finished: set[str] = set()
    for event in events:
        name = event.get("event")
        if not isinstance(name, str):  # an unhashable or foreign value is no known fact
            continue
        if name == "tool_started":
            started.add(_call_key(event))
        elif name == "tool_finished":
            finished.add(_call_key(event))
        elif name in _TERMINAL_EVENTS:
            started -= finished
            finished.clear()
    unfinished = started - finished
    if unfinished:
        return min(unfinished), False
    return (min(started), True) if started else None


def executed_calls(events: Iterable[Mapping[str, Any]]) -> set[str]:
    """Call ids that ran: finished and not refused before any effect (``refused``: nothing was started)."""
    return {_call_key(e) for e in events if e.get("event") == "tool_finished" and e.get("refused") is not True}


def _call_key(event: Mapping[str, Any]) -> str:
    call_id = event.get("call_id")
    return call_id if isinstance(call_id, str) else f"<invalid call_id {call_id!r}>"
