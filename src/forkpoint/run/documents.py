"""The documents of a run: manifest.json, replay-summary.json, result.json (success and failure) with its
metadata and artifact list, and the group commit that makes them durable. The engine decides what happened;
this module only writes it down, so every output byte is produced here.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from forkpoint.adapters import versions
from forkpoint.core.errors import ErrorKind, ReplayError, no_space
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import CallPolicy, Continuation, Mode, NativePrefix, Plan
from forkpoint.core.protocols import PROTOCOLS
from forkpoint.core.results import (
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
from forkpoint.run.journal import Journal, describe_ambiguous
from forkpoint.run.request import ReplayRequest

if TYPE_CHECKING:
    from forkpoint.run.replay import ReplayOutcome
    from forkpoint.sandbox.base import Sandbox
    from forkpoint.workspace import Inventory


@dataclass
class RunFacts:
    """What the engine's steps learn about a run, for result.json's metadata: one typed field per fact, so a step
    that reads a fact another step never set is a type error, not a KeyError after the tools ran."""

    #: the child environment policy and the names (never values) passed through
    child_environment: dict[str, Any]
    #: --workspace-from: what the workspace was created from (the resolved git commit, ...)
    workspace_from: dict[str, Any] | None = None
    #: the workspace as the replay found it, before any tool ran
    fresh_inventory: Inventory | None = None
    #: what the executor re-ran differently from the recording (e.g. a container environment run locally)
    replay_degradations: list[str] = field(default_factory=list)
    #: metadata.divergence (set when tools were replayed)
    divergence: dict[str, Any] | None = None
    #: the boundary snapshot's description (forkpoint.branches.branching.take_snapshot)
    boundary_snapshot: dict[str, Any] | None = None
    #: the per-command process limit and how often it was reached (forkpoint.process.limits)
    process_limit: dict[str, Any] | None = None
    #: the sandbox the run's tools ran through (its description and the recorded-path rewrites)
    sandbox: Sandbox | None = field(default=None, repr=False)
    #: the verifier's verdict on the final workspace (``--score``), result.json's top-level ``score``
    score: dict[str, Any] | None = None
    #: metadata.scoring: the group this run's continuations belong to and the original's reward
    scoring: dict[str, Any] | None = None

    def metadata(self) -> dict[str, Any]:
        """The facts in result.json's key order: only those a step set."""
        facts: dict[str, Any] = {"child_environment": self.child_environment}
        if self.workspace_from is not None:
            facts["workspace_from"] = self.workspace_from
        if self.fresh_inventory is not None:
            facts.update(self.fresh_inventory.to_metadata())
        if self.replay_degradations:
            facts["replay_degradations"] = self.replay_degradations
        if self.divergence is not None:
            facts["divergence"] = self.divergence
        if self.boundary_snapshot is not None:
            facts["boundary_snapshot"] = self.boundary_snapshot
        if self.process_limit is not None:
            facts["process_limit"] = self.process_limit
        if self.scoring is not None:
            facts["scoring"] = self.scoring
        if self.sandbox is not None:
            facts.update(sandbox=self.sandbox.describe(), path_rewrites=self.sandbox.path_rewrites,
                         path_restores=self.sandbox.path_restores)
        return facts


@dataclass(frozen=True)
class RunDirs:
    run_id: str
    state_dir: Path
    output_dir: Path

    @classmethod
    def of(cls, request: ReplayRequest) -> RunDirs:
        run_id = request.resolved_run_id()
        return cls(run_id, request.state_dir.absolute() / run_id, request.output_dir.absolute() / run_id)

    def allocate_output(self) -> None:
        """Create the run's output dir; an existing one is never reused."""
        try:
            self.output_dir.parent.mkdir(parents=True, exist_ok=True)
            self.output_dir.mkdir(mode=0o700)
        except FileExistsError:
            raise ReplayError(
                ErrorKind.EXECUTOR,
                f"output directory {self.output_dir} already exists; forkpoint never reuses a run's output "
                "(choose another --run-id)",
            ) from None
        except OSError as exc:
            raise no_space(exc, self.output_dir) or ReplayError(
                ErrorKind.EXECUTOR, f"create output directory {self.output_dir}: {exc}") from None


def agent_status(continuation: Continuation | None) -> AgentStatus:
    if continuation is None:
        return "not_started"
    if continuation.agent_status in ("max_steps", "failed"):
        return cast(AgentStatus, continuation.agent_status)
    return "completed"


def input_condition(request: ReplayRequest) -> str:
    if request.boundary_user_prompt and request.mode is Mode.REPLAY_AND_CONTINUE:
        return "boundary_user_prompt_appended"
    return "replayed_boundary_only"


def plan_manifest(plan: Plan, agent: str) -> dict[str, Any]:
    """The plan as a document: what will be (or was) replayed, without any observation content."""
    parsed = plan.trajectory
    return {
        "schema_version": MANIFEST_SCHEMA,
        "agent": {"name": agent, "version": plan.version.recorded if plan.version else versions.label(parsed.version),
                  "profile": plan.profile, **(plan.version.to_json() if plan.version else {})},
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


def prompt_facts(request: ReplayRequest) -> dict[str, Any]:
    """The boundary prompt is never persisted: only whether it was given, its length and its hash."""
    prompt = request.boundary_user_prompt or None
    return {
        "boundary_user_prompt_requested": prompt is not None,
        "boundary_user_prompt_sha256": sha256_hex(prompt) if prompt else None,
        "boundary_user_prompt_length": len(prompt) if prompt else None,
    }


def prompt_metadata(request: ReplayRequest, continuation: Continuation | None = None) -> dict[str, Any]:
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


def run_metadata(
    request: ReplayRequest,
    plan: Plan,
    prefix: NativePrefix,
    outcome: ReplayOutcome | None,
    continuation: Continuation | None = None,
) -> dict[str, Any]:
    parsed = plan.trajectory
    not_refreshable = [
        {"call_id": call.call_id, "name": call.name, "policy": policy.value, "reason": reason,
         **({"subagent": call.subagent} if call.subagent else {})}
        for call in plan.replayed_calls
        for policy, reason in [plan.policy_of(call)]
        if policy is not CallPolicy.FRESH
    ]
    from forkpoint import __version__

    return {
        "mode": request.mode.value,
        "forkpoint_version": __version__,
        "source_path": str(parsed.source_path),
        "source_sha256": parsed.source_sha256,
        "after_step": plan.after_step,
        "complete_batches": parsed.complete_count,
        "selected_batches": plan.after_step,
        "selected_tool_calls": len(plan.calls),
        "native_session_id": prefix.session_id,
        "native_prefix_sha256": prefix.sha256,
        "input_condition": input_condition(request),
        "boundary_user_prompt": prompt_metadata(request, continuation),
        "calls_not_refreshable": not_refreshable,
        "stale_observations_reused": outcome.stale_reused if outcome else [],
        "observations_reused": outcome.reused if outcome else {},
        "observation_notes": outcome.notes if outcome else {},
        "parse_warnings": list(parsed.warnings),
        "version": plan.version.to_json() if plan.version else None,
        **(continuation.metadata if continuation else {}),
    }


#: the quality reason of an executor degradation, by its ``<what>:`` label
DEGRADATION_REASONS = {"environment": "environment_replayed_locally", "model": "model_class_substituted"}


def degradation_reasons(degradations: list[str]) -> list[str]:
    """One quality reason per kind of executor degradation (the full texts stay in ``replay_degradations``)."""
    labels = (DEGRADATION_REASONS.get(text.partition(":")[0], "replay_degraded") for text in degradations)
    return list(dict.fromkeys(labels))


def finished_result(request: ReplayRequest, plan: Plan, dirs: RunDirs, prefix: NativePrefix,
                    outcome: ReplayOutcome | None, continuation: Continuation | None, status: str,
                    stopped: Failure | None, facts: RunFacts) -> ReplayResult:
    """Write replay-summary.json and commit result.json of a run that reached its end (``stopped``: the
    divergence that ended it before the continuation)."""
    from forkpoint.run.divergence import observations_match

    continued_steps = continuation.continued_steps if continuation else 0
    summary = {
        "schema_version": SUMMARY_SCHEMA,
        "agent": request.agent,
        "after_step": plan.after_step,
        "replayed_tool_calls": outcome.executed if outcome else 0,
        "stale_observations_reused": len(outcome.stale_reused) if outcome else 0,
        "exact_observations": outcome.exact if outcome else 0,
        "different_observations": len(outcome.comparisons) - outcome.exact if outcome else 0,
        "comparison_is_gating": False,
        "continuation_status": status,
        "continued_steps": continued_steps,
        "boundary_user_prompt": prompt_metadata(request, continuation),
    }
    facts_of_version = plan.version
    if facts_of_version is not None:
        summary.update(recorded_version=facts_of_version.recorded,
                       recorded_version_status=facts_of_version.status,
                       tool_semantics_version=facts_of_version.tool_version,
                       tool_profile=facts_of_version.tool_profile)
    write_json(dirs.output_dir / "replay-summary.json", summary, durable=False)
    reasons = [*versions.reasons(plan.version), *(["stale_observations"] if outcome and outcome.stale_reused else []),
               *dict.fromkeys(outcome.reused.values() if outcome else ()),
               *dict.fromkeys(outcome.notes.values() if outcome else ()),
               *degradation_reasons(facts.replay_degradations)]
    degraded = bool(reasons)
    phase: Phase = "continued" if continuation else ("prepared" if status == "prepared" else "replayed")
    metadata = run_metadata(request, plan, prefix, outcome, continuation)
    metadata.update(facts.metadata())
    if outcome is not None:  # the call-by-call evidence a replay of an unverified version stands on
        metadata.update(exact_observations=outcome.exact, compared_observations=len(outcome.comparisons))
    result = ReplayResult(
        phase=phase,
        quality="degraded" if degraded else "verified",
        quality_reasons=reasons,
        **version_fields(plan),
        observations_match=observations_match(outcome.comparisons if outcome else None),
        failure=stopped,
        agent_status=agent_status(continuation),
        run_id=dirs.run_id,
        agent=agent_info(request.agent, plan),
        after_step=plan.after_step,
        replayed_tool_calls=outcome.executed if outcome else 0,
        prefix_model_turns=plan.prefix_model_turns,
        continued_steps=continued_steps,
        state_dir=str(dirs.state_dir),
        output_dir=str(dirs.output_dir),
        artifacts=artifacts(dirs.output_dir, prefix, continuation),
        score=facts.score,
        metadata=metadata,
    )
    commit_result(dirs, result)
    return result


def agent_info(agent: str, plan: Plan) -> AgentInfo:
    """The agent block: the RECORDED version (a label), and whose tool semantics re-ran it."""
    facts = plan.version
    if facts is None:
        return AgentInfo(name=agent, version=versions.label(plan.trajectory.version), profile=plan.profile)
    return AgentInfo(name=agent, version=facts.recorded, profile=plan.profile, version_status=facts.status,
                     format_family=facts.format_family, tool_semantics_version=facts.tool_version,
                     tool_profile=facts.tool_profile)


def version_fields(plan: Plan) -> dict[str, Any]:
    """``recorded_version`` and ``recorded_version_status`` of the result."""
    facts = plan.version
    return {"recorded_version": facts.recorded if facts else versions.label(plan.trajectory.version),
            "recorded_version_status": facts.status if facts else None}


def artifacts(
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
        from forkpoint.run.compare import NEXT_ACTION_SCHEMA

        artifacts.append(Artifact(role="next_action_comparison", format=NEXT_ACTION_SCHEMA, path=str(next_action)))
    logs = output_dir / "logs"
    if logs.is_dir():
        artifacts.append(Artifact(role="agent_logs", format="directory", path=str(logs)))
    return artifacts


def failure_result(
    request: ReplayRequest,
    plan: Plan,
    journal: Journal,
    dirs: RunDirs,
    error: ReplayError,
) -> ReplayResult:
    """Record the failure durably; a started-but-unfinished tool call upgrades it to ambiguous_execution."""
    error = without_secrets(request, error)
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
        quality_reasons=["failed", *versions.reasons(plan.version)],
        agent_status="failed" if "continuation_started" in events else "not_started",
        **version_fields(plan),
        run_id=dirs.run_id,
        agent=agent_info(request.agent, plan),
        after_step=plan.after_step,
        replayed_tool_calls=journal.completed_calls_in_current_run(),
        prefix_model_turns=plan.prefix_model_turns,
        state_dir=str(dirs.state_dir),
        output_dir=str(dirs.output_dir),
        artifacts=artifacts(dirs.output_dir, None),
        failure=Failure(category=error.kind.category, message=error.message, retryable=error.kind.retryable),
        metadata={"replayed_tool_calls_complete": False},
    )
    try:
        commit_result(dirs, result)
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


def commit_result(dirs: RunDirs, result: ReplayResult) -> None:
    """One group commit: the run's outputs become durable before the result that names them; the result's own
    directory fsync also commits their renames (same directory)."""
    written = [path for name in _GROUP_COMMITTED if (path := dirs.output_dir / name).is_file()]
    make_durable(written, directories=False)
    write_json(dirs.output_dir / "result.json", result.to_json())


def without_secrets(request: ReplayRequest, error: ReplayError) -> ReplayError:
    """The failure without the boundary prompt or an upstream key: a message may quote the agent's output, which
    may quote what the upstream answered (an error can echo the request's text). Values under 8 characters are
    left alone (replacing them would garble the message more than it protects)."""
    secrets = {request.boundary_user_prompt or "": "<boundary prompt>"}
    secrets.update({os.environ.get(p.key_env, ""): "<api key>" for p in PROTOCOLS.values() if p.key_env})
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


def early_failure(dirs: RunDirs, error: ReplayError) -> ReplayResult:
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
