"""The ambiguity rules over journal facts (``forkpoint.run.journal_rules``, pure): which calls have unknown effects."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from forkpoint.run.journal_rules import executed_calls, find_ambiguous


def _ev(event: str, **fields: Any) -> dict[str, Any]:
    return {"event": event, **fields}


def test_repeated_call_id_after_a_terminal_run_remains_ambiguous() -> None:
    events = [
        _ev("run_started"),
        _ev("tool_started", call_id="same-call"),
        _ev("tool_finished", call_id="same-call"),
        _ev("run_finished", status="completed"),
        _ev("run_started"),
        _ev("tool_started", call_id="same-call"),
    ]
    assert find_ambiguous(events) == "same-call"


def test_ambiguity_reports_the_lexicographically_first_call() -> None:
    events = [_ev("tool_started", call_id=c) for c in ("c", "a", "b")]
    assert find_ambiguous(events) == "a"


def test_executed_calls_are_finished_and_not_refused() -> None:
    events = [_ev("tool_finished", call_id="a"), _ev("tool_finished", call_id="b", refused=True),
              _ev("tool_started", call_id="c"), _ev("tool_finished", call_id=7)]
    assert executed_calls(events) == {"a", "<invalid call_id 7>"}


_NAMES = st.sampled_from(
    ["run_started", "plan_validated", "tool_started", "tool_finished", "run_finished", "run_failed", "other"]
)
_ANY_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)
_ARBITRARY_EVENT = st.dictionaries(
    st.sampled_from(["event", "call_id", "seq", "tool"]) | st.text(max_size=4),
    _ANY_VALUE | _NAMES,
    max_size=4,
)


@given(st.lists(_ARBITRARY_EVENT, max_size=30))
def test_find_ambiguous_never_raises(events: list[dict[str, Any]]) -> None:
    result = find_ambiguous(events)
    assert result is None or isinstance(result, str)


_CALL_IDS = st.text(alphabet="abc", min_size=1, max_size=2)


@st.composite
def _resolved_runs(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Runs in which every started call finishes before the run's terminal receipt (ids may be reused)."""
    events: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 4))):
        events.append(_ev("run_started"))
        for _ in range(draw(st.integers(0, 3))):  # batches
            calls = draw(st.lists(_CALL_IDS, unique=True, max_size=3))
            events.extend(_ev("tool_started", call_id=c) for c in calls)
            if draw(st.booleans()):
                events.append(_ev("other"))
            events.extend(_ev("tool_finished", call_id=c) for c in draw(st.permutations(calls)))
        events.append(_ev(draw(st.sampled_from(["run_finished", "run_failed"]))))
    return events


@given(_resolved_runs())
def test_every_start_finished_before_a_terminal_receipt_is_never_ambiguous(
    events: list[dict[str, Any]],
) -> None:
    assert find_ambiguous(events) is None


@given(_resolved_runs(), _CALL_IDS)
def test_a_trailing_unfinished_start_is_always_ambiguous(events: list[dict[str, Any]], call_id: str) -> None:
    assert find_ambiguous([*events, _ev("tool_started", call_id=call_id)]) == call_id
