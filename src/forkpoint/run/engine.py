"""execute(request) -> ReplayResult: the whole pipeline, top-down. No agent-specific code lives here.

prepare -> allocate -> replay -> rebuild -> continue -> commit. Order matters and is part of the contract:
everything that can be refused (validation, parsing, boundary, budgets, version) is refused BEFORE the state
journal is opened and BEFORE the output directory is created, so a refused request never consumes a run id.
After allocation every failure still writes result.json (forkpoint.run.documents), and a failure after a tool
started without a recorded outcome becomes ambiguous_execution. What an agent can do comes from its AgentSpec.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.adapters import agent_spec, get_adapter, versions
from forkpoint.adapters.base import Adapter
from forkpoint.adapters.spec import AgentSpec
from forkpoint.core.errors import ErrorKind, ReplayError, configuration, no_space
from forkpoint.core.model import Continuation, LaunchTarget, Mode, NativePrefix, Plan, RunContext
from forkpoint.core.results import Failure, ReplayResult, write_json
from forkpoint.process import childenv
from forkpoint.run import documents as documents
from forkpoint.run import plan as planning
from forkpoint.run import scoring
from forkpoint.run.journal import Journal, executed_calls
from forkpoint.run.request import (
    ReplayRequest,
    boundary,
    chosen_upstream,
    continue_settings,
    score_spec,
    validate_request,
)
from forkpoint.sandbox import open_sandbox

if TYPE_CHECKING:  # replay, compare and workspace (subprocess, ctypes, tarfile) load only when a run needs them
    from forkpoint.run.replay import ReplayOutcome
    from forkpoint.sandbox.base import Sandbox
    from forkpoint.workspace import WorkspaceSource

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Prepared:
    plan: Plan
    spec: AgentSpec
    adapter: Adapter
    launch: LaunchTarget | None
    sandbox: Sandbox | None = None
    workspace_source: WorkspaceSource | None = None


def execute(request: ReplayRequest, progress: Progress | None = None, warn: Progress | None = None) -> ReplayResult:
    """Run one replay request to a result; never raises for user-facing failures. ``warn`` receives the lines
    that must reach the user even in --json mode (diverging calls under --on-divergence warn)."""
    report = progress or (lambda _message: None)
    dirs = documents.RunDirs.of(request)
    try:
        prepared = _prepare(request, report)
        plan = prepared.plan
        # prepare-only causes no effect: its journal protects nothing, so it is never fsync'd
        journal = Journal.open(dirs.state_dir, durable=request.mode is not Mode.PREPARE_ONLY)
    except ReplayError as error:
        return documents.early_failure(dirs, error)
    if request.mode is not Mode.PREPARE_ONLY:
        executed = len(executed_calls(journal.events()))  # calls refused before any effect are not counted
        if executed:
            journal.close()
            return documents.early_failure(dirs, ReplayError(
                ErrorKind.AMBIGUOUS_EXECUTION,
                f"the state dir {dirs.state_dir} already holds a run that executed {executed} tool call(s); "
                "replaying again would repeat their side effects in a workspace that is no longer fresh — "
                "use a fresh workspace and a new --run-id",
            ))
    workspace_lock = None
    try:
        if request.mode is not Mode.PREPARE_ONLY:  # one run at a time executes in a workspace (prepare-only: none)
            from forkpoint.workspace.lock import lock_workspace

            workspace_lock = lock_workspace(request.workspace, dirs.run_id, create=request.workspace_from is not None)
        dirs.allocate_output()
    except ReplayError as error:
        if workspace_lock is not None:
            workspace_lock.release()
        journal.close()
        return documents.early_failure(dirs, error)
    with journal, workspace_lock or contextlib.nullcontext(), childenv.passing(
            childenv.resolve(request.env, os.environ).values, temp_dir=dirs.state_dir / "tmp"), _limiting(request):
        try:
            return _run_allocated(request, prepared, journal, dirs, report, warn or (lambda _message: None))
        except ReplayError as error:
            return documents.failure_result(request, plan, journal, dirs, error)
        except Exception as exc:  # a bug must still leave a result behind, never a half-written run
            full = no_space(exc, dirs.output_dir) if isinstance(exc, OSError) else None
            if full is not None:  # a full disk is no bug: say which file could not be written
                return documents.failure_result(request, plan, journal, dirs, full)
            import traceback

            detail = "".join(traceback.format_exception_only(exc)).strip()
            internal = ReplayError(ErrorKind.INTERNAL, f"internal error: {detail}")
            return documents.failure_result(request, plan, journal, dirs, internal)


def _prepare(request: ReplayRequest, report: Progress) -> Prepared:
    """Validate, parse, select the boundary and check budgets: pure refusals, nothing written."""
    validate_request(request)
    workspace_source = _workspace_source(request)
    if not request.trajectory.is_file():
        raise configuration(f"trajectory does not exist or is not a regular file: {request.trajectory}")
    spec, adapter = agent_spec(request.agent), get_adapter(request.agent)
    source = request.trajectory.resolve()
    report(f"parsing {source}")
    companion = request.companion_file()
    parsed = (adapter.parse(source, request.max_trajectory_bytes) if companion is None
              else adapter.parse_completed(source, companion, request.max_trajectory_bytes))
    plan = versions.plan_for(adapter, parsed, boundary(request, parsed.complete_count), request.mode,
                             allow_stale_observations=request.allow_stale_observations,
                             reuse_observations=tuple(request.reuse_observations),
                             mcp_servers=_mcp_servers(request),
                             require_verified=request.require_verified_version)
    parsed = plan.trajectory  # as replay reads it: a recorded version that is not verified reads as its profile's
    planning.check_step_budget(request.mode, request.max_steps, plan.prefix_model_turns)
    launch: LaunchTarget | None = None
    sandbox: Sandbox | None = None
    if request.mode is not Mode.PREPARE_ONLY:
        _require(spec.replays, f"re-running tools is not available yet for {spec.name}; use --prepare-only")
        sandbox = _sandbox(request, spec, parsed.cwd)
    if request.mode is Mode.REPLAY_AND_CONTINUE:
        upstream = chosen_upstream(request, spec)
        if upstream.key_env is not None and not os.environ.get(upstream.key_env):
            raise configuration(f"--upstream {upstream.name} needs {upstream.key_env} in forkpoint's environment "
                                "(it is never passed to the agent); or use --upstream stub")
        _require(spec.continues, f"continuing the agent is not available yet for {spec.name}; "
                                 "use --replay-only or --prepare-only")
        launch = adapter.prepare_launch(versions.launch_trajectory(spec, plan, request.agent_version),
                                        request.agent_entrypoint)
        report(f"agent binary: {request.agent} {launch.version} ({launch.entrypoint})")
    report(f"selected batches 1..{plan.after_step} of {parsed.complete_count} ({len(plan.calls)} tool calls)")
    return Prepared(plan, spec, adapter, launch, sandbox, workspace_source)


def _require(capable: bool, refusal: str) -> None:
    if not capable:
        raise configuration(refusal)


def _workspace_source(request: ReplayRequest) -> WorkspaceSource | None:
    """The workspace must exist, unless --workspace-from creates it (then it must be absent or empty); a
    prepare-only run executes nothing, so it needs none (issue 28)."""
    if request.workspace_from is None:
        if request.mode is not Mode.PREPARE_ONLY and not request.workspace.is_dir():
            raise ReplayError(ErrorKind.WORKSPACE, f"workspace is not a directory: {request.workspace}")
        return None
    if request.mode is Mode.PREPARE_ONLY:
        raise configuration("--workspace-from creates a workspace to replay in; --prepare-only runs nothing")
    from forkpoint.workspace import check_target, parse_source

    source = parse_source(request.workspace_from)
    check_target(request.workspace)
    return source


def _limiting(request: ReplayRequest) -> contextlib.AbstractContextManager[None]:
    """Every command of the run gets ``--max-processes`` (a prepare-only run starts none, and loads no process
    machinery)."""
    if request.mode is Mode.PREPARE_ONLY:
        return contextlib.nullcontext()
    from forkpoint.process import limits

    return limits.limiting(request.max_processes)


def _sandbox(request: ReplayRequest, spec: AgentSpec, recorded_cwd: str | None) -> Sandbox:
    """Where tools run; refuses a workspace the sandbox cannot place at the recorded cwd (see forkpoint.sandbox)."""
    if request.sandbox not in spec.sandbox_features:
        raise configuration(f"{spec.name} does not run its tools through --sandbox {request.sandbox} yet; "
                            "use --sandbox local")
    if request.path_map and "path_map" not in spec.sandbox_features:
        raise configuration(f"{spec.name} does not rewrite recorded paths (--path-map) yet")
    return open_sandbox(request.sandbox, request.workspace.resolve(), recorded_cwd, request.path_map,
                        rootfs=request.rootfs, image=request.image)


def _run_allocated(request: ReplayRequest, prepared: Prepared, journal: Journal, dirs: documents.RunDirs,
                   report: Progress, warn: Progress) -> ReplayResult:
    plan, adapter = prepared.plan, prepared.adapter
    parsed = plan.trajectory
    journal.append("run_started", sync=False,  # made durable by the first fact that precedes an effect, or at the end
                   run_id=dirs.run_id, agent=adapter.name, mode=request.mode.value, source_sha256=parsed.source_sha256,
                   after_step=plan.after_step, **documents.prompt_facts(request))
    journal.append("plan_validated", sync=False, profile=plan.profile, batches=plan.after_step,
                   tool_calls=len(plan.calls))
    write_json(dirs.output_dir / "manifest.json", documents.plan_manifest(plan, adapter.name), durable=False)

    facts = documents.RunFacts(child_environment={"policy": "allowlist",  # names only, never values
                                                  **childenv.resolve(request.env, os.environ).metadata()})
    if prepared.workspace_source is not None:
        report(f"creating the workspace {request.workspace} from {request.workspace_from}")
        from forkpoint.workspace import create

        facts.workspace_from = create(prepared.workspace_source, request.workspace)
        journal.append("workspace_created", sync=False, **facts.workspace_from)
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
        outcome = _replay(plan, adapter, context, journal, report, facts, request)
        report("writing the native session with fresh observations")
        prefix = adapter.write_rebuilt_prefix(plan, outcome.fresh, prefix_dir)
        journal.append("session_rebuilt", sync=False, sha256=prefix.sha256)
        status = "replayed"
    stopped = _divergence(request, outcome, facts, journal, warn)
    if outcome is not None and request.keeps_snapshot():
        from forkpoint.branches.branching import take_snapshot

        report("keeping the boundary snapshot")
        facts.boundary_snapshot = take_snapshot(context.workspace, dirs.state_dir, dirs.output_dir, dirs.run_id)
    continuation: Continuation | None = None
    if request.mode is Mode.REPLAY_AND_CONTINUE and stopped is None:
        if request.branches > 1 or request.branch_prompts:
            if facts.boundary_snapshot is None:  # validate_request refuses branches with --drop-snapshot
                raise configuration("branches continue from the boundary snapshot, and this run kept none")
            continuation, stopped = _branch(request, prepared, prefix, context, journal, report,
                                            facts.boundary_snapshot)
        else:
            continuation = _continue(request, prepared, prefix, context, journal, report)
        status = continuation.agent_status
    _score(request, prepared, outcome, stopped, continuation, journal, report, facts)
    journal.append("run_finished", status=status)
    journal.copy_to(dirs.output_dir / "replay-events.jsonl", durable=False)
    if request.mode is not Mode.PREPARE_ONLY:
        from forkpoint.process import limits

        facts.process_limit = limits.metadata()
    facts.sandbox = prepared.sandbox
    return documents.finished_result(request, plan, dirs, prefix, outcome, continuation, status, stopped, facts)


def _score(request: ReplayRequest, prepared: Prepared, outcome: ReplayOutcome | None, stopped: Failure | None,
           continuation: Continuation | None, journal: Journal, report: Progress, facts: documents.RunFacts) -> None:
    """``--score``: the verifier's verdict on the final workspace of a replayed (and maybe continued) run; a
    branched run's branches were each scored in their own (forkpoint.branches.branching)."""
    spec = score_spec(request)
    if spec is None:
        return
    facts.scoring = {"group_id": scoring.group_id(prepared.plan.trajectory.source_sha256, prepared.plan.after_step),
                     "original_reward": request.original_reward}
    branched = continuation is not None and "branches" in continuation.metadata
    if outcome is None or stopped is not None or branched or prepared.sandbox is None:
        return
    from forkpoint.run.verify import run_verifier

    report("scoring the final workspace")
    facts.score = run_verifier(spec, prepared.sandbox)
    journal.append("scored", sync=False, reward=facts.score["reward"], exit=facts.score["exit"],
                   failure=facts.score["failure"])


def _replay(plan: Plan, adapter: Adapter, context: RunContext, journal: Journal, report: Progress,
            facts: documents.RunFacts, request: ReplayRequest) -> ReplayOutcome:
    """Re-run the prefix's tools in the workspace, compared with the recorded observations (observations.json)."""
    from forkpoint.run.replay import replay_batches
    from forkpoint.workspace import inventory

    fresh_tree = inventory(context.workspace)  # before anything runs: what "fresh" meant for this run
    journal.append("workspace_inventory", sync=False, sha256=fresh_tree.sha256, files=fresh_tree.files)
    facts.fresh_inventory = fresh_tree
    mcp = None
    if request.mcp_config is not None:  # the user's MCP servers, started on first use, killed when the replay ends
        from forkpoint.process.mcp import McpClients, load_config

        mcp = McpClients(load_config(request.mcp_config), request.mcp_timeout, context.workspace)
        mcp.start()
        context = replace(context, mcp=mcp)
    executor = adapter.executor(plan, context)
    try:
        outcome = replay_batches(plan, executor, journal, report, adapter.normalise_observation,
                                 adapter.session_chunk)
    finally:
        executor.close()
        if mcp is not None:
            mcp.close()
    # what the executor re-ran differently from the recording (e.g. a container environment run locally)
    degradations = [str(item) for item in getattr(executor, "degradations", ())]
    if degradations:
        facts.replay_degradations = degradations
        journal.append("replay_degraded", sync=False, degradations=degradations)
    write_json(context.output_dir / "observations.json", {"observations": outcome.comparisons}, durable=False)
    return outcome


def _divergence(request: ReplayRequest, outcome: ReplayOutcome | None, facts: documents.RunFacts,
                journal: Journal, warn: Progress) -> Failure | None:
    """Record the diverging calls (metadata.divergence), warn of them, or stop before the continuation."""
    if outcome is None:
        return None
    from forkpoint.run.divergence import stop_message, summary, warning_lines

    facts.divergence = summary(outcome.comparisons, request.on_divergence)
    count = facts.divergence["count"]
    if not count:
        return None
    journal.append("divergence", sync=False, count=count, policy=request.on_divergence)
    if request.on_divergence == "warn":
        for line in warning_lines(outcome.comparisons):
            warn(line)
    if request.on_divergence != "stop":
        return None
    kind = ErrorKind.DIVERGENCE
    return Failure(category=kind.category, message=stop_message(outcome.comparisons), retryable=kind.retryable)


def _continue(request: ReplayRequest, prepared: Prepared, prefix: NativePrefix, context: RunContext,
              journal: Journal, report: Progress) -> Continuation:
    """Start the real agent on the rebuilt session; its model traffic goes through the gate."""
    plan = prepared.plan
    settings = continue_settings(request, prepared.spec, prepared.launch, plan)
    launch, upstream, remaining = settings.target, settings.upstream, settings.remaining_steps
    journal.append("continuation_started", agent_version=launch.version, upstream=upstream,
                   remaining_steps=remaining)
    report(f"continuing {request.agent} {launch.version} from batch {plan.after_step} (upstream {upstream})")
    continuation = prepared.adapter.continue_run(plan, prefix, context, settings)
    journal.append("continuation_finished", sync=False, agent_status=continuation.agent_status,
                   continued_steps=continuation.continued_steps,
                   validated_model_requests=continuation.metadata.get("model_bridge", {}).get("validated"))
    from forkpoint.run.compare import next_action_document

    write_json(context.output_dir / "next-action.json",
               next_action_document(plan.original_next_action, continuation.next_action,
                                    input_condition=documents.input_condition(request)), durable=False)
    return continuation


def _branch(request: ReplayRequest, prepared: Prepared, prefix: NativePrefix, context: RunContext,
            journal: Journal, report: Progress, snapshot: dict[str, Any]) -> tuple[Continuation, Failure | None]:
    """K continuations from the boundary snapshot (forkpoint.branches.branching); the run's own journal frames them.
    Also returns the run's failure when every branch failed (the run then exits with it, never 0)."""
    from forkpoint.branches.branching import (
        BranchRequest,
        BranchSetup,
        aggregate,
        branch_variants,
        branches_failure,
        plan_branches,
        run_branches,
    )

    branches = BranchRequest.of(request.branches, request.branch_prompts, request.parallel,
                                variants=branch_variants(request))
    setup = BranchSetup(
        adapter=prepared.adapter, plan=prepared.plan, prefix=prefix,
        settings=continue_settings(request, prepared.spec, prepared.launch, prepared.plan),
        workspace=context.workspace, state_dir=context.state_dir, output_dir=context.output_dir,
        session_id=context.session_id, sandbox_name=request.sandbox, recorded_cwd=prepared.plan.trajectory.cwd,
        snapshot=Path(snapshot["path"]), score=score_spec(request),
        group_id=scoring.group_id(prepared.plan.trajectory.source_sha256, prepared.plan.after_step),
        original_reward=request.original_reward, path_map=tuple(request.path_map))
    plan_branches(setup, branches, snapshot)
    journal.append("branches_started", count=branches.count)
    document = run_branches(setup, branches, report)
    journal.append("branches_finished", sync=False, count=branches.count)
    return aggregate(document), branches_failure(document)


def _mcp_servers(request: ReplayRequest) -> frozenset[str]:
    """The server names of ``--mcp-config`` (validated with the request)."""
    if request.mcp_config is None:
        return frozenset()
    from forkpoint.process.mcp import load_config

    return frozenset(load_config(request.mcp_config))
