"""Boundary selection and the total step budget (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import Batch, CallPolicy, Mode, Observation, ToolCall, Trajectory
from forkpoint.run.plan import check_step_budget, select_boundary
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, simple_session, tool_use


def _parsed(tmp_path: Path, builder: ClaudeSessionBuilder) -> Trajectory:
    return parse_session(builder.write(tmp_path / "s.jsonl"))


@pytest.mark.parametrize(
    ("mode", "max_steps", "prefix", "ok"),
    [
        (Mode.REPLAY_ONLY, 3, 3, True),
        (Mode.REPLAY_ONLY, 2, 3, False),
        (Mode.REPLAY_AND_CONTINUE, 3, 3, False),
        (Mode.REPLAY_AND_CONTINUE, 4, 3, True),
        (Mode.PREPARE_ONLY, 1, 3, True),
        (Mode.REPLAY_AND_CONTINUE, None, 3, True),
    ],
)
def test_total_step_budget(mode: Mode, max_steps: int | None, prefix: int, ok: bool) -> None:
    if ok:
        check_step_budget(mode, max_steps, prefix)
        return
    with pytest.raises(ReplayError) as info:
        check_step_budget(mode, max_steps, prefix)
    assert info.value.kind is ErrorKind.CONFIGURATION
    assert f"selected replay prefix of {prefix} steps" in info.value.message


def test_boundary_outside_the_complete_batches(tmp_path: Path) -> None:
    parsed = _parsed(tmp_path, simple_session(2))
    for after in (0, 3):
        with pytest.raises(ReplayError) as info:
            select_boundary(parsed, after, Mode.PREPARE_ONLY, "p")
        assert info.value.kind is ErrorKind.TRAJECTORY
        assert info.value.message == f"requested after-step {after}, trajectory has 2 complete batches"
    plan = select_boundary(parsed, 2, Mode.PREPARE_ONLY, "p")
    assert [b.ordinal for b in plan.batches] == [1, 2]
    assert plan.original_next_action is not None and plan.original_next_action.text == "Done."


def test_incomplete_batch_is_explained(tmp_path: Path) -> None:
    builder = simple_session(1)
    builder.assistant([tool_use("t9", "Bash", {"command": "x"})])
    with pytest.raises(ReplayError, match="batch 2 is incomplete"):
        select_boundary(_parsed(tmp_path, builder), 2, Mode.PREPARE_ONLY, "p")


def test_stale_calls_fail_closed_unless_allowed(tmp_path: Path) -> None:
    builder = ClaudeSessionBuilder()
    builder.user_prompt("go")
    builder.assistant([tool_use("todo", "TodoWrite", {"todos": []})])
    builder.results({"todo": "ok"})
    parsed = _parsed(tmp_path, builder)
    with pytest.raises(ReplayError, match="--allow-stale-observations") as info:
        select_boundary(parsed, 1, Mode.REPLAY_ONLY, "p")
    assert info.value.kind is ErrorKind.TRAJECTORY and "TodoWrite(todo)" in info.value.message
    select_boundary(parsed, 1, Mode.REPLAY_ONLY, "p", allow_stale_observations=True)
    select_boundary(parsed, 1, Mode.PREPARE_ONLY, "p")  # nothing runs in prepare-only


def test_refused_calls_stay_refused_with_the_flag(tmp_path: Path) -> None:
    builder = ClaudeSessionBuilder()
    builder.user_prompt("go")
    builder.assistant([tool_use("bg", "Bash", {"command": "sleep 9", "run_in_background": True})])
    builder.results({"bg": "started"})
    with pytest.raises(ReplayError) as info:
        select_boundary(_parsed(tmp_path, builder), 1, Mode.REPLAY_ONLY, "p", allow_stale_observations=True)
    assert info.value.kind is ErrorKind.UNSUPPORTED_TOOL and info.value.kind.exit_code == 11
    assert "run_in_background" in info.value.message


def _neutral(*batches: tuple[CallPolicy, ...], complete: int | None = None,
             refusals: dict[int, str] | None = None) -> Trajectory[None]:
    """A recording of no agent in particular: one batch per tuple, one call per policy (select_boundary is
    generic; what an agent classifies as stale or refused is its adapter's test)."""
    made = [Batch(ordinal, tuple(ToolCall(f"c{ordinal}.{n}", "tool", {}, Observation("out"), policy,
                                          None if policy is CallPolicy.FRESH else f"{policy} here")
                                 for n, policy in enumerate(policies)), f"line:{ordinal}",
                  complete=complete is None or ordinal <= complete)
            for ordinal, policies in enumerate(batches, start=1)]
    return Trajectory.recorded("neutral", None, Path("/recording"), "0" * 64, session_id=None, cwd=None,
                               batches=made, next_actions=[None] * (len(made) + 1), native=None,
                               boundary_refusals=refusals)


def test_a_neutral_recording_is_cut_as_its_batches_say() -> None:
    parsed = _neutral((CallPolicy.FRESH,), (CallPolicy.FRESH, CallPolicy.FRESH), (CallPolicy.FRESH,), complete=2)
    plan = select_boundary(parsed, 2, Mode.REPLAY_ONLY, "p")
    assert [b.ordinal for b in plan.batches] == [1, 2] and [c.call_id for c in plan.calls] == ["c1.0", "c2.0", "c2.1"]
    with pytest.raises(ReplayError, match="batch 3 is incomplete"):
        select_boundary(parsed, 3, Mode.PREPARE_ONLY, "p")
    with pytest.raises(ReplayError, match="cannot be rebuilt unambiguously: a fork here") as info:
        select_boundary(_neutral((CallPolicy.FRESH,), refusals={1: "a fork here"}), 1, Mode.PREPARE_ONLY, "p")
    assert info.value.kind is ErrorKind.TRAJECTORY


def test_a_neutral_stale_call_needs_the_flag_and_a_refused_one_is_refused_with_it() -> None:
    stale = _neutral((CallPolicy.FRESH, CallPolicy.STALE))
    with pytest.raises(ReplayError, match="--allow-stale-observations"):
        select_boundary(stale, 1, Mode.REPLAY_ONLY, "p")
    assert select_boundary(stale, 1, Mode.REPLAY_ONLY, "p", allow_stale_observations=True).calls
    select_boundary(stale, 1, Mode.PREPARE_ONLY, "p")  # nothing runs in prepare-only
    with pytest.raises(ReplayError) as info:
        select_boundary(_neutral((CallPolicy.REFUSED,)), 1, Mode.REPLAY_ONLY, "p", allow_stale_observations=True)
    assert info.value.kind is ErrorKind.UNSUPPORTED_TOOL and "refused here" in info.value.message


def _with(policy: CallPolicy, name: str, mcp: tuple[str, str] | None = None) -> Trajectory[None]:
    call = ToolCall("c1", name, {}, Observation("out"), policy, "why", mcp=mcp)
    return Trajectory.recorded("neutral", None, Path("/recording"), "0" * 64, session_id=None, cwd=None,
                               batches=[Batch(1, (call,), "line:1")], next_actions=[None, None], native=None)


def test_reuse_globs_make_a_stale_call_reused_by_request_never_a_refused_one() -> None:
    stale = _with(CallPolicy.STALE, "mcp__docs__read")
    plan = select_boundary(stale, 1, Mode.REPLAY_ONLY, "p", reuse_observations=("mcp__docs__*",))
    assert plan.policy_of(plan.calls[0]) == (CallPolicy.REUSED, "reused_by_request")
    with pytest.raises(ReplayError, match="--allow-stale-observations"):
        select_boundary(stale, 1, Mode.REPLAY_ONLY, "p", reuse_observations=("mcp__other__*",))
    with pytest.raises(ReplayError) as info:
        select_boundary(_with(CallPolicy.REFUSED, "mcp__docs__read"), 1, Mode.REPLAY_ONLY, "p",
                        reuse_observations=("*",))
    assert info.value.kind is ErrorKind.UNSUPPORTED_TOOL


def test_an_mcp_call_of_a_configured_server_is_re_run() -> None:
    stale = _with(CallPolicy.STALE, "mcp__docs__read", mcp=("docs", "read"))
    plan = select_boundary(stale, 1, Mode.REPLAY_ONLY, "p", mcp_servers=frozenset({"docs"}))
    assert plan.policy_of(plan.calls[0]) == (CallPolicy.FRESH, None)
    with pytest.raises(ReplayError, match="--allow-stale-observations"):
        select_boundary(stale, 1, Mode.REPLAY_ONLY, "p", mcp_servers=frozenset({"web"}))


def test_a_stale_call_inside_a_sub_agent_needs_the_flag_and_names_the_sub_agent() -> None:
    inner = ToolCall("s1", "WebFetch", {}, Observation("page"), CallPolicy.STALE, "web", subagent="agent-x")
    parent = ToolCall("c1", "Agent", {}, Observation("answer"), CallPolicy.REUSED, "subagent_answer_reused",
                      subcalls=(inner,))
    parsed = Trajectory.recorded("neutral", None, Path("/recording"), "0" * 64, session_id=None, cwd=None,
                                 batches=[Batch(1, (parent,), "line:1")], next_actions=[None, None], native=None)
    with pytest.raises(ReplayError, match="made by the sub-agent agent-x"):
        select_boundary(parsed, 1, Mode.REPLAY_ONLY, "p")
    plan = select_boundary(parsed, 1, Mode.REPLAY_ONLY, "p", allow_stale_observations=True)
    assert [call.call_id for call in plan.replayed_calls] == ["s1", "c1"]
