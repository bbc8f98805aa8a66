"""Re-run the tool calls of batches 1..N, journaling before and after each call (the side-effect receipts).

A call whose observation cannot be refreshed is never executed: its recorded observation is reused and
marked ``stale_reused`` (the plan already refused it unless --allow-stale-observations was given). A call reused by
design (``CallPolicy.REUSED``: a sub-agent's answer, a tool named by --reuse-observations) is marked ``reused`` with
its quality reason instead. A sub-agent's own calls run right before the call that started it, in their order.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from forkpoint.adapters.base import ToolExecutor
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import CallPolicy, FreshObservation, Plan, ToolCall
from forkpoint.run.compare import mark_timing, observation_entry
from forkpoint.run.journal import Journal


@dataclass
class ReplayOutcome:
    fresh: dict[str, FreshObservation] = field(default_factory=dict)
    comparisons: list[dict[str, Any]] = field(default_factory=list)

    @property
    def executed(self) -> int:
        return sum(1 for observation in self.fresh.values() if not observation.stale_reused)

    @property
    def stale_reused(self) -> list[str]:
        return [call_id for call_id, observation in self.fresh.items() if observation.stale_reused]

    @property
    def reused(self) -> dict[str, str]:
        """call id -> quality reason of each observation reused by design (``CallPolicy.REUSED``)."""
        return {call_id: observation.reused for call_id, observation in self.fresh.items() if observation.reused}

    @property
    def notes(self) -> dict[str, str]:
        """call id -> quality reason of each re-run observation whose input came partly from the recording."""
        return {call_id: observation.note for call_id, observation in self.fresh.items() if observation.note}

    @property
    def exact(self) -> int:
        return sum(1 for row in self.comparisons if row["exact"])


def replay_batches(
    plan: Plan,
    executor: ToolExecutor,
    journal: Journal,
    progress: Callable[[str], None],
    normalise: Callable[[Any], Any] | None = None,
    session_chunk: Callable[[Any], tuple[str, str] | None] | None = None,
) -> ReplayOutcome:
    outcome = ReplayOutcome()
    sessions: dict[str, list[tuple[int, Any, Any]]] = {}
    total = len(plan.replayed_calls)
    done = 0
    for batch in plan.batches:
        journal.append("batch_started", sync=False, batch=batch.ordinal)
        for call in (inner for top in batch.calls for inner in _order(plan, top)):
            done += 1
            who = f" (sub-agent {call.subagent})" if call.subagent else ""
            progress(f"[{done}/{total}] batch {batch.ordinal}: {call.name}{who} {_short(call)}")
            policy, reason = plan.policy_of(call)
            if policy is CallPolicy.FRESH:
                try:
                    fresh = _execute(batch.ordinal, call, executor, journal)
                except ReplayError as error:
                    if not (error.stale_fallback and plan.allow_stale_observations):
                        raise
                    progress(f"  stale: {error.message}")
                    fresh = _reuse(call, None)
            else:
                fresh = _reuse(call, reason if policy is CallPolicy.REUSED else None)
            outcome.fresh[call.call_id] = fresh
            key = fresh.native.get("session_key") if isinstance(fresh.native, dict) else None
            if isinstance(key, str) and call.historical is not None:
                sessions.setdefault(key, []).append((len(outcome.comparisons), call.historical.content, fresh.content))
            outcome.comparisons.append(
                observation_entry(
                    call.call_id,
                    call.name,
                    batch.ordinal,
                    call.historical,
                    fresh.content,
                    fresh.is_error,
                    truncated=fresh.truncated,
                    stale_reused=fresh.stale_reused,
                    normalise=normalise,
                    reused=fresh.reused,
                    note=fresh.note,
                    subagent=call.subagent,
                )
            )
        journal.append("batch_committed", sync=False, batch=batch.ordinal)
    if session_chunk is not None:
        mark_timing(outcome.comparisons, sessions, session_chunk)
    return outcome


def _execute(batch: int, call: ToolCall, executor: ToolExecutor, journal: Journal) -> FreshObservation:
    journal.append("tool_started", batch=batch, call_id=call.call_id, tool=call.name)
    started = time.monotonic()
    try:
        fresh = executor.run(call)
    except ReplayError as error:
        if error.before_effect:
            journal.append("tool_finished", sync=False, batch=batch, call_id=call.call_id, refused=True, is_error=True,
                           return_code=None, duration_ms=int((time.monotonic() - started) * 1000))
        raise
    journal.append(
        "tool_finished",
        sync=False,  # follows the effect: made durable by the next tool_started (see forkpoint.run.journal)
        batch=batch,
        call_id=call.call_id,
        is_error=fresh.is_error,
        return_code=fresh.return_code,
        truncated=fresh.truncated,
        duration_ms=int((time.monotonic() - started) * 1000),
    )
    return fresh


def _order(plan: Plan, call: ToolCall) -> tuple[ToolCall, ...]:
    """A call and its sub-agent's calls in the order they ran; a stale call's sub-agent is not re-run (its answer
    is reused as recorded)."""
    policy, _ = plan.policy_of(call)
    return (call,) if policy is CallPolicy.STALE else (
        *(inner for sub in call.subcalls for inner in _order(plan, sub)), call)


def _reuse(call: ToolCall, reason: str | None) -> FreshObservation:
    """The recorded observation: stale (a fallback the user opted into) or, with ``reason``, reused by design."""
    historical = call.historical
    assert historical is not None  # only complete batches are selectable
    return FreshObservation(call.call_id, historical.content, historical.is_error, stale_reused=reason is None,
                            reused=reason)


def _short(call: ToolCall) -> str:
    from forkpoint.run.inspection import short_input

    return short_input(call.arguments)
