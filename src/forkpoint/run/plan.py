"""Boundary selection and step budgets: pure functions over a parsed trajectory."""

from __future__ import annotations

from forkpoint.core.errors import ErrorKind, ReplayError, configuration, trajectory
from forkpoint.core.model import CallPolicy, Mode, Plan, ToolCall, Trajectory


def select_boundary(
    parsed: Trajectory,
    after_step: int,
    mode: Mode,
    profile: str,
    *,
    allow_stale_observations: bool = False,
    reuse_observations: tuple[str, ...] = (),
    mcp_servers: frozenset[str] = frozenset(),
) -> Plan:
    """Cut the trajectory after ``after_step`` complete batches, refusing boundaries that cannot be rebuilt."""
    complete = parsed.complete_count
    if after_step < 1 or after_step > complete:
        detail = ""
        if parsed.incomplete_tail:
            detail = f" (batch {complete + 1} is incomplete: a tool call has no recorded result)"
        raise trajectory(
            f"requested after-step {after_step}, trajectory has {complete} complete batches{detail}"
        )
    refusal = parsed.boundary_refusals.get(after_step)
    if refusal is not None:
        raise trajectory(f"after-step {after_step} cannot be rebuilt unambiguously: {refusal}")
    plan = Plan(
        trajectory=parsed,
        after_step=after_step,
        mode=mode,
        profile=profile,
        allow_stale_observations=allow_stale_observations,
        reuse_observations=reuse_observations,
        mcp_servers=mcp_servers,
    )
    if mode is not Mode.PREPARE_ONLY:
        check_call_policies(plan)
    return plan


def check_call_policies(plan: Plan) -> None:
    """Fail closed on calls whose observation cannot be regenerated, unless degradation was allowed."""
    for batch in plan.batches:
        for call in batch.calls:
            _check_call(plan, batch.ordinal, call)


def _check_call(plan: Plan, ordinal: int, call: ToolCall) -> None:
    policy, reason = plan.policy_of(call)
    who = f" (made by the sub-agent {call.subagent})" if call.subagent else ""
    if policy is CallPolicy.REFUSED:
        raise ReplayError(
            ErrorKind.UNSUPPORTED_TOOL,
            f"tool call {call.name}({call.call_id}){who} in batch {ordinal} cannot be replayed: {reason}",
        )
    if policy is CallPolicy.STALE and not plan.allow_stale_observations:
        raise trajectory(
            f"tool call {call.name}({call.call_id}){who} in batch {ordinal} can only reuse its "
            f"recorded observation ({reason}); pass --allow-stale-observations to opt into a degraded replay"
        )
    if policy is CallPolicy.STALE:
        return  # its recorded observation is reused as it is: a sub-agent's calls are not re-run either
    for inner in call.subcalls:
        _check_call(plan, ordinal, inner)


def check_step_budget(mode: Mode, max_steps: int | None, prefix_steps: int) -> None:
    """``max_steps`` is the TOTAL budget including the replayed prefix."""
    if max_steps is None or mode is Mode.PREPARE_ONLY:
        return
    if mode is Mode.REPLAY_ONLY and max_steps < prefix_steps:
        raise configuration(
            f"max_steps {max_steps} is smaller than the selected replay prefix of {prefix_steps} steps"
        )
    if mode is Mode.REPLAY_AND_CONTINUE and max_steps <= prefix_steps:
        raise configuration(
            f"max_steps {max_steps} leaves no live step after the selected replay prefix of {prefix_steps} steps"
        )
