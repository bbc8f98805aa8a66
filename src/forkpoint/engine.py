"""execute(request) -> ReplayResult: the whole pipeline, top-down. No agent-specific code lives here.

Order matters and is part of the contract: everything that can be refused (validation, parsing, boundary,
budgets, version) is refused BEFORE the state journal is opened and BEFORE the output directory is
created, so a refused request never consumes a run id. After allocation every failure still writes
result.json, and a failure after a tool started without a recorded outcome becomes ambiguous_execution.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from forkpoint import childenv
from forkpoint import plan as planning
from forkpoint.adapters import get_adapter
from forkpoint.adapters.base import Adapter, ContinuingAdapter, ReplayingAdapter
from forkpoint.divergence import observations_match
from forkpoint.errors import ErrorKind, ReplayError, configuration, no_space
from forkpoint.hashing import sha256_hex
from forkpoint.journal import Journal, describe_ambiguous, executed_calls
from forkpoint.model import Continuation, ContinueSettings, LaunchTarget, Mode, NativePrefix, Plan, RunContext
from forkpoint.request import ReplayRequest, validate_request
from forkpoint.results import (
    MANIFEST_SCHEMA,
    SUMMARY_SCHEMA,
    AgentInfo,
    AgentStatus,
    Artifact,
    Failure,
    Phase,
    ReplayResult,
    make_durable,
    write_json,
)
from forkpoint.sandbox import open_sandbox

if TYPE_CHECKING:  # replay, compare and workspace (subprocess, ctypes, tarfile) load only when a run needs them
    from forkpoint.replay import ReplayOutcome
    from forkpoint.sandbox.base import Sandbox
    from forkpoint.workspace import WorkspaceSource

Progress = Callable[[str], None]


@dataclass(frozen=True)
class RunDirs:
    run_id: str
    state_dir: Path
    output_dir: Path


def execute(request: ReplayRequest, progress: Progress | None = None, warn: Progress | None = None) -> ReplayResult:
    """Run one replay request to a result; never raises for user-facing failures. ``warn`` receives the lines
    that must reach the user even in --json mode (diverging calls under --on-divergence warn)."""
    report = progress or (lambda _message: None)
    dirs = _run_dirs(request)
    try:
        prepared = _prepare(request, report)
        plan = prepared.plan
        # prepare-only causes no effect: its journal protects nothing, so it is never fsync'd
        journal = Journal.open(dirs.state_dir, durable=request.mode is not Mode.PREPARE_ONLY)
    except ReplayError as error:
        return _early_failure(dirs, error)
    if request.mode is not Mode.PREPARE_ONLY:
        executed = _executed_calls(journal)
        if executed:
            journal.close()
            return _early_failure(dirs, ReplayError(
                ErrorKind.AMBIGUOUS_EXECUTION,
                f"the state dir {dirs.state_dir} already holds a run that executed {executed} tool call(s); "
                "replaying again would repeat their side effects in a workspace that is no longer fresh — "
                "use a fresh workspace and a new --run-id",
            ))
    workspace_lock = None
    try:
        if request.mode is not Mode.PREPARE_ONLY:  # one run at a time executes in a workspace (prepare-only: none)
            from forkpoint.workspace_lock import lock_workspace

            workspace_lock = lock_workspace(request.workspace, dirs.run_id, create=request.workspace_from is not None)
        _allocate_output(dirs.output_dir)
    except ReplayError as error:
        if workspace_lock is not None:
            workspace_lock.release()
        journal.close()
        return _early_failure(dirs, error)
    with journal, workspace_lock or contextlib.nullcontext(), childenv.passing(
            childenv.resolve(request.env, os.environ).values, temp_dir=dirs.state_dir / "tmp"):
        try:
            return _run_allocated(request, prepared, journal, dirs, report, warn or (lambda _message: None))
        except ReplayError as error:
            return _finalize_failure(request, plan, journal, dirs, error)
        except Exception as exc:  # a bug must still leave a result behind, never a half-written run
            full = no_space(exc, dirs.output_dir) if isinstance(exc, OSError) else None
            if full is not None:  # a full disk is no bug: say which file could not be written
                return _finalize_failure(request, plan, journal, dirs, full)
            import traceback

            detail = "".join(traceback.format_exception_only(exc)).strip()
            internal = ReplayError(ErrorKind.INTERNAL, f"internal error: {detail}")
            return _finalize_failure(request, plan, journal, dirs, internal)


def _executed_calls(journal: Journal) -> int:
    """Calls an earlier run with this run id executed (their effects are already in the workspace); a call refused
    before it could have any effect is not one of them."""
    return len(executed_calls(journal.events()))


def _run_dirs(request: ReplayRequest) -> RunDirs:
    run_id = request.resolved_run_id()
    return RunDirs(
        run_id=run_id,
        state_dir=request.state_dir.absolute() / run_id,
        output_dir=request.output_dir.absolute() / run_id,
    )


@dataclass(frozen=True)
class Prepared:
    plan: Plan
    adapter: Adapter
    launch: LaunchTarget | None
    sandbox: Sandbox | None = None
    workspace_source: WorkspaceSource | None = None


def _prepare(request: ReplayRequest, report: Progress) -> Prepared:
    """Validate, parse, select the boundary and check budgets: pure refusals, nothing written."""
    validate_request(request)
    workspace_source = _workspace_source(request)
    if not request.trajectory.is_file():
        raise configuration(f"trajectory does not exist or is not a regular file: {request.trajectory}")
    adapter = get_adapter(request.agent)
    source = request.trajectory.resolve()
    report(f"parsing {source}")
    if request.opencode_export is not None:  # an OpenCode event log completed by the session's export
        from forkpoint.adapters.opencode.parse import parse_opencode

        if not request.opencode_export.is_file():
            raise configuration(f"opencode_export is not a regular file: {request.opencode_export}")
        parsed = parse_opencode(source, export=request.opencode_export.resolve(),
                                max_bytes=request.max_trajectory_bytes)
    else:
        parsed = adapter.parse(source, request.max_trajectory_bytes)
    profile = adapter.profile_for(parsed)
    plan = planning.select_boundary(
        parsed,
        request.after_step,
        request.mode,
        profile,
        allow_stale_observations=request.allow_stale_observations,
    )
    planning.check_step_budget(request.mode, request.max_steps, plan.prefix_model_turns)
    launch: LaunchTarget | None = None
    sandbox: Sandbox | None = None
    if request.mode is not Mode.PREPARE_ONLY:
        sandbox = _sandbox(request, _replaying(adapter), parsed.cwd)
    if request.mode is Mode.REPLAY_AND_CONTINUE:
        upstream = _upstream_name(request, adapter)
        key_name = UPSTREAM_ENV.get(upstream, (None, None))[0]
        if key_name is not None and not os.environ.get(key_name):
            raise configuration(f"--upstream {upstream} needs {key_name} in forkpoint's environment "
                                "(it is never passed to the agent); or use --upstream stub")
        launch = _continuing(adapter).prepare_launch(parsed, request.agent_entrypoint)
        report(f"agent binary: {request.agent} {launch.version} ({launch.entrypoint})")
    report(f"selected batches 1..{plan.after_step} of {parsed.complete_count} ({len(plan.calls)} tool calls)")
    return Prepared(plan, adapter, launch, sandbox, workspace_source)


def _workspace_source(request: ReplayRequest) -> WorkspaceSource | None:
    """The workspace must exist, unless --workspace-from creates it (then it must be absent or empty)."""
    if request.workspace_from is None:
        if not request.workspace.is_dir():
            raise ReplayError(ErrorKind.WORKSPACE, f"workspace is not a directory: {request.workspace}")
        return None
    if request.mode is Mode.PREPARE_ONLY:
        raise configuration("--workspace-from creates a workspace to replay in; --prepare-only runs nothing")
    from forkpoint.workspace import check_target, parse_source

    source = parse_source(request.workspace_from)
    check_target(request.workspace)
    return source


def _sandbox(request: ReplayRequest, adapter: Adapter, recorded_cwd: str | None) -> Sandbox:
    """Where tools run; refuses a workspace the sandbox cannot place at the recorded cwd (see forkpoint.sandbox)."""
    supported: frozenset[str] = getattr(adapter, "sandbox_features", frozenset({"local"}))
    if request.sandbox not in supported:
        raise configuration(f"{adapter.name} does not run its tools through --sandbox {request.sandbox} yet; "
                            "use --sandbox local")
    if request.path_map and "path_map" not in supported:
        raise configuration(f"{adapter.name} does not rewrite recorded paths (--path-map) yet")
    return open_sandbox(request.sandbox, request.workspace.resolve(), recorded_cwd, request.path_map)


#: upstream -> (API key variable, base URL variable) read from forkpoint's OWN environment.
UPSTREAM_ENV = {
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "openai-responses": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "openai-chat": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
}


def _upstream_name(request: ReplayRequest, adapter: Adapter) -> str:
    """The request's upstream, else the agent's own wire protocol; it must be one the adapter speaks."""
    supported: tuple[str, ...] = getattr(adapter, "upstreams", ("stub",))
    name = request.upstream or supported[0]
    if name not in supported:
        raise configuration(f"{adapter.name} cannot use --upstream {name}; supported: {', '.join(supported)}")
    return name


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
        raise no_space(exc, output_dir) or ReplayError(
            ErrorKind.EXECUTOR, f"create output directory {output_dir}: {exc}") from None


def _run_allocated(
    request: ReplayRequest,
    prepared: Prepared,
    journal: Journal,
    dirs: RunDirs,
    report: Progress,
    warn: Progress,
) -> ReplayResult:
    plan, adapter = prepared.plan, prepared.adapter
    parsed = plan.trajectory
    journal.append(
        "run_started",
        sync=False,  # made durable by the first fact that precedes an effect, or by run_finished
        run_id=dirs.run_id,
        agent=adapter.name,
        mode=request.mode.value,
        source_sha256=parsed.source_sha256,
        after_step=plan.after_step,
        **_prompt_facts(request),
    )
    journal.append("plan_validated", sync=False, profile=plan.profile, batches=plan.after_step,
                   tool_calls=len(plan.calls))
    write_json(dirs.output_dir / "manifest.json", manifest(plan, adapter), durable=False)

    facts: dict[str, Any] = {"child_environment": {"policy": "allowlist",  # names only, never values
                                                   **childenv.resolve(request.env, os.environ).metadata()}}
    if prepared.workspace_source is not None:
        report(f"creating the workspace {request.workspace} from {request.workspace_from}")
        from forkpoint.workspace import create

        facts["workspace_from"] = create(prepared.workspace_source, request.workspace)
        journal.append("workspace_created", sync=False, **facts["workspace_from"])
    context = RunContext(request.workspace.resolve(), dirs.state_dir, dirs.output_dir, parsed.session_id,
                         sandbox=prepared.sandbox)
    prefix_dir = dirs.output_dir / "native" / "prefix"
    outcome: ReplayOutcome | None = None
    if request.mode is Mode.PREPARE_ONLY:
        report("writing the native prefix with historical observations")
        prefix = adapter.write_prepared_prefix(plan, prefix_dir)
        journal.append("session_prepared", sync=False, sha256=prefix.sha256)
        status = "prepared"
    else:
        from forkpoint.replay import replay_batches
        from forkpoint.workspace import inventory

        replaying = _replaying(adapter)
        fresh_tree = inventory(context.workspace)  # before anything runs: what "fresh" meant for this run
        journal.append("workspace_inventory", sync=False, sha256=fresh_tree.sha256, files=fresh_tree.files)
        facts.update(fresh_tree.to_metadata())
        executor = replaying.executor(plan, context)
        try:
            outcome = replay_batches(plan, executor, journal, report, getattr(adapter, "normalise_observation", None))
        finally:
            executor.close()
        write_json(dirs.output_dir / "observations.json", {"observations": outcome.comparisons}, durable=False)
        report("writing the native session with fresh observations")
        prefix = replaying.write_rebuilt_prefix(plan, outcome.fresh, prefix_dir)
        journal.append("session_rebuilt", sync=False, sha256=prefix.sha256)
        status = "replayed"
    stopped = _divergence(request, outcome, facts, journal, warn)
    if outcome is not None and _keeps_snapshot(request):
        from forkpoint.branching import take_snapshot

        report("keeping the boundary snapshot")
        facts["boundary_snapshot"] = take_snapshot(context.workspace, dirs.state_dir)
    continuation: Continuation | None = None
    if request.mode is Mode.REPLAY_AND_CONTINUE and stopped is None:
        assert prepared.launch is not None
        if request.branches > 1 or request.branch_prompts:
            continuation = _branch(request, prepared, prefix, context, journal, report, facts["boundary_snapshot"])
        else:
            continuation = _continue(request, prepared, prefix, context, journal, report)
        status = continuation.agent_status
    journal.append("run_finished", status=status)
    journal.copy_to(dirs.output_dir / "replay-events.jsonl", durable=False)

    continued_steps = continuation.continued_steps if continuation else 0
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
        "continued_steps": continued_steps,
        "boundary_user_prompt": _prompt_metadata(request, continuation),
    }
    write_json(dirs.output_dir / "replay-summary.json", summary, durable=False)
    degraded = bool(outcome and outcome.stale_reused)
    phase: Phase = "continued" if continuation else ("prepared" if status == "prepared" else "replayed")
    metadata = _metadata(request, plan, prefix, outcome, continuation)
    if prepared.sandbox is not None:
        facts.update(sandbox=prepared.sandbox.describe(), path_rewrites=prepared.sandbox.path_rewrites,
                     path_restores=prepared.sandbox.path_restores)
    metadata.update(facts)
    result = ReplayResult(
        phase=phase,
        quality="degraded" if degraded else "verified",
        observations_match=observations_match(outcome.comparisons if outcome else None),
        failure=stopped,
        agent_status=_agent_status(continuation),
        run_id=dirs.run_id,
        agent=AgentInfo(name=adapter.name, version=parsed.version, profile=plan.profile),
        after_step=plan.after_step,
        replayed_tool_calls=outcome.executed if outcome else 0,
        prefix_model_turns=plan.prefix_model_turns,
        continued_steps=continued_steps,
        state_dir=str(dirs.state_dir),
        output_dir=str(dirs.output_dir),
        artifacts=_artifacts(dirs.output_dir, prefix, continuation),
        metadata=metadata,
    )
    _commit_result(dirs, result)
    return result


def _divergence(request: ReplayRequest, outcome: ReplayOutcome | None, facts: dict[str, Any], journal: Journal,
                warn: Progress) -> Failure | None:
    """Record the diverging calls (metadata.divergence), warn of them, or stop before the continuation."""
    if outcome is None:
        return None
    from forkpoint.divergence import stop_message, summary, warning_lines

    facts["divergence"] = summary(outcome.comparisons, request.on_divergence)
    if not facts["divergence"]["count"]:
        return None
    journal.append("divergence", sync=False, count=facts["divergence"]["count"], policy=request.on_divergence)
    if request.on_divergence == "warn":
        for line in warning_lines(outcome.comparisons):
            warn(line)
    if request.on_divergence != "stop":
        return None
    kind = ErrorKind.DIVERGENCE
    return Failure(category=kind.category, message=stop_message(outcome.comparisons), retryable=kind.retryable)


def _continue(
    request: ReplayRequest,
    prepared: Prepared,
    prefix: NativePrefix,
    context: RunContext,
    journal: Journal,
    report: Progress,
) -> Continuation:
    """Start the real agent on the rebuilt session; its model traffic goes through the gate."""
    plan = prepared.plan
    settings = continue_settings(request, prepared.adapter, prepared.launch, plan)
    launch, upstream, remaining = settings.target, settings.upstream, settings.remaining_steps
    journal.append("continuation_started", agent_version=launch.version, upstream=upstream,
                   remaining_steps=remaining)
    report(f"continuing {request.agent} {launch.version} from batch {plan.after_step} (upstream {upstream})")
    continuation = _continuing(prepared.adapter).continue_run(plan, prefix, context, settings)
    journal.append(
        "continuation_finished",
        sync=False,
        agent_status=continuation.agent_status,
        continued_steps=continuation.continued_steps,
        validated_model_requests=continuation.metadata.get("model_bridge", {}).get("validated"),
    )
    from forkpoint.compare import next_action_document

    write_json(
        context.output_dir / "next-action.json",
        next_action_document(plan.original_next_action, continuation.next_action,
                             input_condition=_input_condition(request)),
        durable=False,
    )
    return continuation


def continue_settings(request: ReplayRequest, adapter: Adapter, launch: LaunchTarget | None,
                      plan: Plan) -> ContinueSettings:
    """Where and how the continued agent's model traffic goes (keys from forkpoint's own environment)."""
    assert launch is not None
    remaining = request.max_steps - plan.prefix_model_turns if request.max_steps is not None else None
    upstream = _upstream_name(request, adapter)
    key_name, url_name = UPSTREAM_ENV.get(upstream, (None, None))
    return ContinueSettings(
        target=launch,
        upstream=upstream,
        upstream_url=request.upstream_url or (os.environ.get(url_name) if url_name else None) or None,
        upstream_key=os.environ.get(key_name) if key_name else None,
        boundary_prompt=request.boundary_user_prompt or None,
        remaining_steps=remaining,
    )


def _keeps_snapshot(request: ReplayRequest) -> bool:
    if request.keep_snapshot is not None:
        return request.keep_snapshot
    return request.mode is Mode.REPLAY_ONLY or request.branches > 1 or bool(request.branch_prompts)


def _branch(request: ReplayRequest, prepared: Prepared, prefix: NativePrefix, context: RunContext,
            journal: Journal, report: Progress, snapshot: dict[str, Any]) -> Continuation:
    """K continuations from the boundary snapshot (forkpoint.branching); the run's own journal frames them."""
    from forkpoint.branching import BranchRequest, BranchSetup, aggregate, plan_branches, run_branches

    branches = BranchRequest.of(request.branches, request.branch_prompts, request.parallel)
    setup = BranchSetup(
        adapter=_continuing(prepared.adapter), plan=prepared.plan, prefix=prefix,
        settings=continue_settings(request, prepared.adapter, prepared.launch, prepared.plan),
        workspace=context.workspace, state_dir=context.state_dir, output_dir=context.output_dir,
        session_id=context.session_id, sandbox_name=request.sandbox, recorded_cwd=prepared.plan.trajectory.cwd,
        snapshot=Path(snapshot["path"]))
    plan_branches(setup, branches, snapshot)
    journal.append("branches_started", count=branches.count)
    document = run_branches(setup, branches, report)
    journal.append("branches_finished", sync=False, count=branches.count)
    return aggregate(document)


def _agent_status(continuation: Continuation | None) -> AgentStatus:
    if continuation is None:
        return "not_started"
    if continuation.agent_status in ("max_steps", "failed"):
        return cast(AgentStatus, continuation.agent_status)
    return "completed"


def _continuing(adapter: Adapter) -> ContinuingAdapter:
    if not hasattr(adapter, "prepare_launch") or not hasattr(adapter, "continue_run"):
        raise configuration(f"continuing the agent is not available yet for {adapter.name}; "
                            "use --replay-only or --prepare-only")
    return cast(ContinuingAdapter, adapter)


def _input_condition(request: ReplayRequest) -> str:
    if request.boundary_user_prompt and request.mode is Mode.REPLAY_AND_CONTINUE:
        return "boundary_user_prompt_appended"
    return "replayed_boundary_only"


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


def _prompt_metadata(request: ReplayRequest, continuation: Continuation | None = None) -> dict[str, Any]:
    prompt = request.boundary_user_prompt or None
    injected = bool(prompt and continuation and continuation.metadata.get("model_bridge", {}).get("validated"))
    detail: dict[str, Any] = {"requested": prompt is not None, "injected": injected, "injection_count": int(injected)}
    if prompt is not None:
        detail["sha256"] = sha256_hex(prompt)
        detail["length"] = len(prompt)
    if injected:
        detail["position"] = "after_boundary_observation"
    else:
        detail["reason"] = request.mode.value if request.mode is not Mode.REPLAY_AND_CONTINUE else "not_injected"
    return detail


def _metadata(
    request: ReplayRequest,
    plan: Plan,
    prefix: NativePrefix,
    outcome: ReplayOutcome | None,
    continuation: Continuation | None = None,
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
        "input_condition": _input_condition(request),
        "boundary_user_prompt": _prompt_metadata(request, continuation),
        "calls_not_refreshable": not_refreshable,
        "stale_observations_reused": outcome.stale_reused if outcome else [],
        "parse_warnings": list(parsed.warnings),
        **(continuation.metadata if continuation else {}),
    }


def _artifacts(
    output_dir: Path, prefix: NativePrefix | None, continuation: Continuation | None = None
) -> list[Artifact]:
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
    if continuation is not None and continuation.continued_path.is_file():
        artifacts.append(Artifact(role="continued_native_session", format=prefix.format if prefix else "native",
                                  path=str(continuation.continued_path)))
    branches = output_dir / "branches.json"
    if branches.exists():
        artifacts.append(Artifact(role="branches", format="forkpoint.branches/v1", path=str(branches)))
    next_action = output_dir / "next-action.json"
    if next_action.exists():
        from forkpoint.compare import NEXT_ACTION_SCHEMA

        artifacts.append(Artifact(role="next_action_comparison", format=NEXT_ACTION_SCHEMA, path=str(next_action)))
    logs = output_dir / "logs"
    if logs.is_dir():
        artifacts.append(Artifact(role="agent_logs", format="directory", path=str(logs)))
    return artifacts


def _finalize_failure(
    request: ReplayRequest,
    plan: Plan,
    journal: Journal,
    dirs: RunDirs,
    error: ReplayError,
) -> ReplayResult:
    """Record the failure durably; a started-but-unfinished tool call upgrades it to ambiguous_execution."""
    error = _without_secrets(request, error)
    with contextlib.suppress(ReplayError):
        journal.append("run_failed", category=error.kind.category, message=error.message)
    # this process knows which of its calls finished even when the run_failed receipt could not be written
    ambiguous = describe_ambiguous([*journal.events(), {"event": "run_failed"}])
    if ambiguous is not None:
        error = ReplayError(ErrorKind.AMBIGUOUS_EXECUTION, f"the run left {ambiguous}; original failure: "
                                                           f"{error.message}")
    with contextlib.suppress(ReplayError, OSError):
        journal.copy_to(dirs.output_dir / "replay-events.jsonl", durable=False)
    current = _records_of_current_run(journal)
    events = {str(record.get("event")) for record in current}
    refused = {str(r.get("call_id")) for r in current if r.get("event") == "tool_finished" and r.get("refused") is True}
    # a call that started (and was not refused before any effect) may have had effects: the phase is not "prepared"
    tools_ran = "session_rebuilt" in events or any(
        r.get("event") == "tool_started" and str(r.get("call_id")) not in refused for r in current)
    if tools_ran and error.kind is ErrorKind.OUTPUT:
        error = ReplayError(error.kind, f"{error.message}; tools already ran in the workspace, so replay again in a "
                                        "fresh workspace with a new --run-id")
    result = ReplayResult(
        phase="replayed" if tools_ran else "prepared",
        quality="degraded",
        agent_status="failed" if "continuation_started" in events else "not_started",
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
    try:
        _commit_result(dirs, result)
    except OSError as exc:  # e.g. the disk is still full: the printed result is all there is
        unwritten = no_space(exc, dirs.output_dir / "result.json")
        detail = unwritten.message if unwritten is not None else f"{exc}"
        failure = result.failure
        assert failure is not None
        failure.message = f"{failure.message}; result.json was not written either: {detail}"
    return result


#: outputs written without fsync and committed together just before result.json (which names them)
_GROUP_COMMITTED = ("manifest.json", "observations.json", "next-action.json", "replay-summary.json",
                    "replay-events.jsonl")


def _commit_result(dirs: RunDirs, result: ReplayResult) -> None:
    """One group commit: the run's outputs become durable before the result that names them; the result's own
    directory fsync also commits their renames (same directory)."""
    written = [path for name in _GROUP_COMMITTED if (path := dirs.output_dir / name).is_file()]
    make_durable(written, directories=False)
    write_json(dirs.output_dir / "result.json", result.to_json())


def _without_secrets(request: ReplayRequest, error: ReplayError) -> ReplayError:
    """The failure without the boundary prompt or an upstream key: a message may quote the agent's output, which
    may quote what the upstream answered (an error can echo the request's text). Values under 8 characters are
    left alone (replacing them would garble the message more than it protects)."""
    secrets = {request.boundary_user_prompt or "": "<boundary prompt>"}
    secrets.update({os.environ.get(key, ""): "<api key>" for key, _ in UPSTREAM_ENV.values()})
    message = error.message
    for secret, shown in sorted(secrets.items(), key=lambda item: -len(item[0])):
        if len(secret.strip()) >= 8:
            message = message.replace(secret, shown)
    if message == error.message:
        return error
    return ReplayError(error.kind, message, line=error.line, before_effect=error.before_effect)


def _records_of_current_run(journal: Journal) -> list[dict[str, Any]]:
    records = journal.events()
    starts = [index for index, record in enumerate(records) if record.get("event") == "run_started"]
    return records[starts[-1]:] if starts else records


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

