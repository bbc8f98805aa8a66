"""execute(request) -> ReplayResult: the whole pipeline, top-down. No agent-specific code lives here.

Order matters and is part of the contract: everything that can be refused (validation, parsing, boundary,
budgets, version) is refused BEFORE the state journal is opened and BEFORE the output directory is
created, so a refused request never consumes a run id. After allocation every failure still writes
result.json, and a failure after a tool started without a recorded outcome becomes ambiguous_execution.
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from forkpoint import plan as planning
from forkpoint.adapters import get_adapter
from forkpoint.adapters.base import Adapter, ReplayingAdapter
from forkpoint.errors import ErrorKind, ReplayError, configuration
from forkpoint.hashing import sha256_hex
from forkpoint.journal import Journal, find_ambiguous
from forkpoint.model import Mode, NativePrefix, Plan, RunContext
from forkpoint.replay import ReplayOutcome, replay_batches
from forkpoint.request import ReplayRequest, validate_request
from forkpoint.results import (
    MANIFEST_SCHEMA,
    SUMMARY_SCHEMA,
    AgentInfo,
    Artifact,
    Failure,
    ReplayResult,
    write_json,
)

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RunDirs:
    run_id: str
    state_dir: Path
    output_dir: Path


def execute(request: ReplayRequest, progress: Progress | None = None) -> ReplayResult:
    """Run one replay request to a result; never raises for user-facing failures."""
    report = progress or (lambda _message: None)
    dirs = _run_dirs(request)
    try:
        plan, adapter = _prepare(request, report)
        journal = Journal.open(dirs.state_dir)
    except ReplayError as error:
        return _early_failure(dirs, error)
    try:
        _allocate_output(dirs.output_dir)
    except ReplayError as error:
        journal.close()
        return _early_failure(dirs, error)
    with journal:
        try:
            return _run_allocated(request, plan, adapter, journal, dirs, report)
        except ReplayError as error:
            return _finalize_failure(request, plan, journal, dirs, error)
        except Exception as exc:  # a bug must still leave a result behind, never a half-written run
            detail = "".join(traceback.format_exception_only(exc)).strip()
            internal = ReplayError(ErrorKind.INTERNAL, f"internal error: {detail}")
            return _finalize_failure(request, plan, journal, dirs, internal)


def _run_dirs(request: ReplayRequest) -> RunDirs:
    run_id = request.resolved_run_id()
    return RunDirs(
        run_id=run_id,
        state_dir=request.state_dir.absolute() / run_id,
        output_dir=request.output_dir.absolute() / run_id,
    )


def _prepare(request: ReplayRequest, report: Progress) -> tuple[Plan, Adapter]:
    """Validate, parse, select the boundary and check budgets: pure refusals, nothing written."""
    validate_request(request)
    if not request.workspace.is_dir():
        raise ReplayError(ErrorKind.WORKSPACE, f"workspace is not a directory: {request.workspace}")
    if not request.trajectory.is_file():
        raise configuration(f"trajectory does not exist or is not a regular file: {request.trajectory}")
    adapter = get_adapter(request.agent)
    source = request.trajectory.resolve()
    report(f"parsing {source}")
    parsed = adapter.parse(source)
    profile = adapter.profile_for(parsed)
    plan = planning.select_boundary(
        parsed,
        request.after_step,
        request.mode,
        profile,
        allow_stale_observations=request.allow_stale_observations,
    )
    planning.check_step_budget(request.mode, request.max_steps, plan.prefix_model_turns)
    if request.mode is not Mode.PREPARE_ONLY:
        _replaying(adapter)
    if request.mode is Mode.REPLAY_AND_CONTINUE:
        raise configuration(
            f"continuing the agent is not available yet for {request.agent} in this forkpoint version; "
            "use --replay-only or --prepare-only"
        )
    report(f"selected batches 1..{plan.after_step} of {parsed.complete_count} ({len(plan.calls)} tool calls)")
    return plan, adapter


def _allocate_output(output_dir: Path) -> None:
    try:
        output_dir.parent.mkdir(parents=True, exist_ok=True)
        output_dir.mkdir(mode=0o700)
    except FileExistsError:
        raise ReplayError(
            ErrorKind.EXECUTOR,
            f"output directory {output_dir} already exists; forkpoint never reuses a run's output "
            "(choose another --run-id)",
        ) from None
    except OSError as exc:
        raise ReplayError(ErrorKind.EXECUTOR, f"create output directory {output_dir}: {exc}") from None


def _run_allocated(
    request: ReplayRequest,
    plan: Plan,
    adapter: Adapter,
    journal: Journal,
    dirs: RunDirs,
    report: Progress,
) -> ReplayResult:
    parsed = plan.trajectory
    journal.append(
        "run_started",
        run_id=dirs.run_id,
        agent=adapter.name,
        mode=request.mode.value,
        source_sha256=parsed.source_sha256,
        after_step=plan.after_step,
        **_prompt_facts(request),
    )
    journal.append("plan_validated", profile=plan.profile, batches=plan.after_step, tool_calls=len(plan.calls))
    write_json(dirs.output_dir / "manifest.json", manifest(plan, adapter))

    context = RunContext(request.workspace.resolve(), dirs.state_dir, dirs.output_dir, parsed.session_id)
    prefix_dir = dirs.output_dir / "native" / "prefix"
    outcome: ReplayOutcome | None = None
    if request.mode is Mode.PREPARE_ONLY:
        report("writing the native prefix with historical observations")
        prefix = adapter.write_prepared_prefix(plan, prefix_dir)
        journal.append("session_prepared", sha256=prefix.sha256)
        status = "prepared"
    else:
        replaying = _replaying(adapter)
        executor = replaying.executor(plan, context)
        try:
            outcome = replay_batches(plan, executor, journal, report)
        finally:
            executor.close()
        write_json(dirs.output_dir / "observations.json", {"observations": outcome.comparisons})
        report("writing the native session with fresh observations")
        prefix = replaying.write_rebuilt_prefix(plan, outcome.fresh, prefix_dir)
        journal.append("session_rebuilt", sha256=prefix.sha256)
        status = "replayed"
    journal.append("run_finished", status=status)
    journal.copy_to(dirs.output_dir / "replay-events.jsonl")

    summary = {
        "schema_version": SUMMARY_SCHEMA,
        "agent": adapter.name,
        "after_step": plan.after_step,
        "replayed_tool_calls": outcome.executed if outcome else 0,
        "stale_observations_reused": len(outcome.stale_reused) if outcome else 0,
        "exact_observations": outcome.exact if outcome else 0,
        "different_observations": len(outcome.comparisons) - outcome.exact if outcome else 0,
        "comparison_is_gating": False,
        "continuation_status": status,
        "continued_steps": 0,
        "boundary_user_prompt": _prompt_metadata(request),
    }
    write_json(dirs.output_dir / "replay-summary.json", summary)
    degraded = bool(outcome and outcome.stale_reused)
    result = ReplayResult(
        phase="prepared" if status == "prepared" else "replayed",
        quality="degraded" if degraded else "verified",
        agent_status="not_started",
        run_id=dirs.run_id,
        agent=AgentInfo(name=adapter.name, version=parsed.version, profile=plan.profile),
        after_step=plan.after_step,
        replayed_tool_calls=outcome.executed if outcome else 0,
        prefix_model_turns=plan.prefix_model_turns,
        continued_steps=0,
        state_dir=str(dirs.state_dir),
        output_dir=str(dirs.output_dir),
        artifacts=_artifacts(dirs.output_dir, prefix),
        metadata=_metadata(request, plan, prefix, outcome),
    )
    write_json(dirs.output_dir / "result.json", result.model_dump(mode="json"))
    return result


def _replaying(adapter: Adapter) -> ReplayingAdapter:
    if not hasattr(adapter, "executor") or not hasattr(adapter, "write_rebuilt_prefix"):
        raise configuration(f"re-running tools is not available yet for {adapter.name}; use --prepare-only")
    return cast(ReplayingAdapter, adapter)


def manifest(plan: Plan, adapter: Adapter) -> dict[str, Any]:
    """The plan as a document: what will be (or was) replayed, without any observation content."""
    parsed = plan.trajectory
    return {
        "schema_version": MANIFEST_SCHEMA,
        "agent": {"name": adapter.name, "version": parsed.version, "profile": plan.profile},
        "mode": plan.mode.value,
        "source": {"path": str(parsed.source_path), "sha256": parsed.source_sha256},
        "session_id": parsed.session_id,
        "cwd": parsed.cwd,
        "boundary": {
            "after_step": plan.after_step,
            "complete_tool_batch": True,
            "complete_batches_available": parsed.complete_count,
            "prefix_model_turns": plan.prefix_model_turns,
            "tool_calls": len(plan.calls),
        },
        "batches": [
            {
                "ordinal": batch.ordinal,
                "native_locator": batch.locator,
                "tool_calls": [
                    {
                        "ordinal": index,
                        "call_id": call.call_id,
                        "name": call.name,
                        "arguments": call.arguments,
                        "policy": call.policy.value,
                        "policy_reason": call.policy_reason,
                    }
                    for index, call in enumerate(batch.calls, start=1)
                ],
            }
            for batch in plan.batches
        ],
    }


def _prompt_facts(request: ReplayRequest) -> dict[str, Any]:
    """The boundary prompt is never persisted: only whether it was given, its length and its hash."""
    prompt = request.boundary_user_prompt or None
    return {
        "boundary_user_prompt_requested": prompt is not None,
        "boundary_user_prompt_sha256": sha256_hex(prompt) if prompt else None,
        "boundary_user_prompt_length": len(prompt) if prompt else None,
    }


def _prompt_metadata(request: ReplayRequest) -> dict[str, Any]:
    prompt = request.boundary_user_prompt or None
    detail: dict[str, Any] = {"requested": prompt is not None, "injected": False, "injection_count": 0}
    if prompt is not None:
        detail["sha256"] = sha256_hex(prompt)
        detail["length"] = len(prompt)
    detail["reason"] = request.mode.value
    return detail


def _metadata(
    request: ReplayRequest, plan: Plan, prefix: NativePrefix, outcome: ReplayOutcome | None
) -> dict[str, Any]:
    parsed = plan.trajectory
    not_refreshable = [
        {"call_id": call.call_id, "name": call.name, "policy": call.policy.value, "reason": call.policy_reason}
        for call in plan.calls
        if call.stale
    ]
    return {
        "mode": request.mode.value,
        "source_path": str(parsed.source_path),
        "source_sha256": parsed.source_sha256,
        "after_step": plan.after_step,
        "complete_batches": parsed.complete_count,
        "selected_batches": plan.after_step,
        "selected_tool_calls": len(plan.calls),
        "native_session_id": prefix.session_id,
        "native_prefix_sha256": prefix.sha256,
        "input_condition": "boundary_user_prompt_appended"
        if request.boundary_user_prompt and request.mode is Mode.REPLAY_AND_CONTINUE
        else "replayed_boundary_only",
        "boundary_user_prompt": _prompt_metadata(request),
        "calls_not_refreshable": not_refreshable,
        "stale_observations_reused": outcome.stale_reused if outcome else [],
        "parse_warnings": list(parsed.warnings),
    }


def _artifacts(output_dir: Path, prefix: NativePrefix | None) -> list[Artifact]:
    known = [
        ("playback_plan", MANIFEST_SCHEMA, output_dir / "manifest.json"),
        ("replay_events", "forkpoint.journal/v1", output_dir / "replay-events.jsonl"),
        ("replay_summary", SUMMARY_SCHEMA, output_dir / "replay-summary.json"),
    ]
    artifacts = [Artifact(role=role, format=fmt, path=str(path)) for role, fmt, path in known if path.exists()]
    if prefix is not None and prefix.path.exists():
        artifacts.append(Artifact(role="native_prefix", format=prefix.format, path=str(prefix.path)))
    comparisons = output_dir / "observations.json"
    if comparisons.exists():
        artifacts.append(Artifact(role="observation_comparison", format="forkpoint.observations/v1",
                                  path=str(comparisons)))
    return artifacts


def _finalize_failure(
    request: ReplayRequest,
    plan: Plan,
    journal: Journal,
    dirs: RunDirs,
    error: ReplayError,
) -> ReplayResult:
    """Record the failure durably; a started-but-unfinished tool call upgrades it to ambiguous_execution."""
    with contextlib.suppress(ReplayError):
        journal.append("run_failed", category=error.kind.category, message=error.message)
    ambiguous = find_ambiguous(journal.events())
    if ambiguous is not None:
        error = ReplayError(
            ErrorKind.AMBIGUOUS_EXECUTION,
            f'tool call "{ambiguous}" has no recorded outcome; original failure: {error.message}',
        )
    with contextlib.suppress(ReplayError, OSError):
        journal.copy_to(dirs.output_dir / "replay-events.jsonl")
    replayed = "session_rebuilt" in _events_of_current_run(journal)
    result = ReplayResult(
        phase="replayed" if replayed else "prepared",
        quality="degraded",
        agent_status="failed" if replayed and request.mode is Mode.REPLAY_AND_CONTINUE else "not_started",
        run_id=dirs.run_id,
        agent=AgentInfo(name=request.agent, version=plan.trajectory.version, profile=plan.profile),
        after_step=plan.after_step,
        replayed_tool_calls=journal.completed_calls_in_current_run(),
        prefix_model_turns=plan.prefix_model_turns,
        state_dir=str(dirs.state_dir),
        output_dir=str(dirs.output_dir),
        artifacts=_artifacts(dirs.output_dir, None),
        failure=Failure(category=error.kind.category, message=error.message, retryable=error.kind.retryable),
        metadata={"replayed_tool_calls_complete": False},
    )
    write_json(dirs.output_dir / "result.json", result.model_dump(mode="json"))
    return result


def _events_of_current_run(journal: Journal) -> list[str]:
    names = [str(event.get("event")) for event in journal.events()]
    starts = [index for index, name in enumerate(names) if name == "run_started"]
    return names[starts[-1]:] if starts else names


def _early_failure(dirs: RunDirs, error: ReplayError) -> ReplayResult:
    """A refusal before allocation: nothing was written; the result is only printed."""
    return ReplayResult(
        phase=None,
        quality=None,
        agent_status="not_started",
        run_id=dirs.run_id,
        state_dir=str(dirs.state_dir),
        output_dir=str(dirs.output_dir),
        failure=Failure(category=error.kind.category, message=error.message, retryable=error.kind.retryable),
    )

