"""Run forkpoint's companion runner (runner.py) on the OpenHands runtime's Python: the only OpenHands I/O shell,
and the continuation hooks (``OpenHandsHooks``) forkpoint.adapters.kit.continuation runs it through.

The runner is a file shipped inside forkpoint; it is started as ``<venv python> runner.py <request.json>`` through
the run's sandbox (forkpoint's supervised process layer: deadline, output caps, no surviving descendants) with
an isolated HOME, credentials stripped, litellm's local cost map (no download) and the request/result files in
the run's state dir. See runner.py for the JSON protocol.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.adapters.kit import continuation as shell
from forkpoint.adapters.kit.continuation import AgentHooks, Collected, GateSpec, Job, LaunchSpec, Outcome, Ran
from forkpoint.adapters.kit.ids import safe_file_stem
from forkpoint.adapters.kit.python_runner import (
    BRIDGE_KEY_ENV,
    DEFAULT_LIVE_STEPS,
    PROMPT_ENV,
    PythonRunner,
    chat_gate,
    continue_env,
)
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import read_sandbox_file
from forkpoint.core.model import JsonObject, Plan
from forkpoint.core.results import write_atomic

if TYPE_CHECKING:
    from forkpoint.bridge.server import BridgeSummary

RUNNER = Path(__file__).with_name("runner.py")
SCHEMA = "forkpoint.openhands-runner/v1"
MAX_ITERATION_ERROR = "Agent reached maximum iteration"


#: the runner's host side (kit.python_runner): started on the runtime's Python in the run's sandbox
RUNNER_SPEC = PythonRunner(
    RUNNER, SCHEMA, "OpenHands", "openhands", ("OPENAI_", "LLM_", "LITELLM_", "SANDBOX_", "OPENHANDS_"),
    {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LOG_LEVEL": "WARNING", "PYTHONDONTWRITEBYTECODE": "1"},
    64 * 1024 * 1024)
work_dir = RUNNER_SPEC.work_dir
environment = RUNNER_SPEC.environment
run_runner = RUNNER_SPEC.run


def recorded_model(events: list[JsonObject]) -> str:
    """The model name the recording's responses carry, so litellm asks the upstream for the same one."""
    for event in events:
        metadata = event.get("tool_call_metadata")
        response = metadata.get("model_response") if isinstance(metadata, dict) else None
        if isinstance(response, dict) and isinstance(response.get("model"), str) and response["model"]:
            return str(response["model"])
    return "gpt-4o"


def supplied_observations(plan: Plan, events: list[JsonObject]) -> list[JsonObject]:
    """The fresh observation events of the prefix's calls, in call order, each naming its tool call id."""
    by_cause = {e.get("cause"): e for e in events if isinstance(e.get("observation"), str)
                and e.get("source") != "environment"}
    out = []
    for call in plan.calls:
        event = by_cause.get(call.native)
        if event is None:
            raise ReplayError(ErrorKind.CONTINUATION, f"the rebuilt prefix has no observation for {call.call_id}")
        metadata = event.get("tool_call_metadata")
        if not isinstance(metadata, dict) or metadata.get("tool_call_id") != call.call_id:
            raise ReplayError(ErrorKind.CONTINUATION, f"the observation of {call.call_id} names another tool call")
        out.append(event)
    return out


@dataclass(frozen=True)
class Installed:
    events: list[JsonObject]  # the rebuilt prefix's events
    work: Path
    replay_path: Path
    fresh_path: Path
    saved: Path  # where the runner saves the continued trajectory
    replayed: int  # actions the runner replays before the first live step (the prompt counts as one)


class OpenHandsHooks(AgentHooks[Installed]):
    """``runner.py continue``: OpenHands' ``run_controller`` replays batches 1..N (answered with the recorded fresh
    observations, not re-executed), then calls the model through litellm -> the bridge -> the gate."""

    protocol = "openai-chat"
    label = "OpenHands"
    native_cli = "openhands"

    def install(self, job: Job) -> Installed:
        from forkpoint.adapters.openhands.session import replay_input, replayed_action_count, write_events

        events = json.loads(job.prefix.path.read_text("utf-8"))
        work = work_dir(job.context)
        replay = replay_input(job.plan)
        replay_path = work / "continue-replay-events.json"
        write_events(replay, replay_path)
        fresh_path = work / "fresh-observations.json"
        write_events(supplied_observations(job.plan, events), fresh_path)
        replayed = replayed_action_count(replay) + (1 if job.boundary_prompt is not None else 0)
        return Installed(events, work, replay_path, fresh_path, work / "continued-trajectory.json", replayed)

    def gate(self, job: Job, state: Installed) -> GateSpec:
        from forkpoint.adapters.openhands.envelope import PrefixError, expected_messages
        from forkpoint.adapters.openhands.gate import PROFILE

        return chat_gate(job, PROFILE, lambda: expected_messages(state.events), PrefixError)

    def launch(self, job: Job, state: Installed, bridge_url: str) -> LaunchSpec:
        remaining, prompt = job.settings.remaining_steps, job.boundary_prompt
        live = remaining if remaining is not None else DEFAULT_LIVE_STEPS
        request: dict[str, Any] = {
            "mode": "continue", "workspace": job.sandbox.cwd, "file_store": str(state.work / "file-store"),
            "sid": f"forkpoint-{safe_file_stem(job.context.session_id or 'session')}",
            "save_trajectory": str(state.saved), "max_iterations": state.replayed + live,
            "replay_events": str(state.replay_path), "fresh_observations": str(state.fresh_path),
            **({"boundary_prompt_env": PROMPT_ENV} if prompt is not None else {}),
            "llm": {"model": f"openai/{recorded_model(state.events)}", "base_url": f"{bridge_url}/v1",
                    "api_key_env": BRIDGE_KEY_ENV},
        }
        env = continue_env(prompt)
        return LaunchSpec([], env, str(state.work), job.context.logs / "openhands-continue.log", request=request)

    def run(self, job: Job, state: Installed, spec: LaunchSpec) -> Ran:
        """The runner's request and result are files (run_runner); its env carries the bridge key and prompt."""
        outcome = run_runner(job.settings.target.entrypoint, job.context, "continue", spec.request,
                             timeout_s=job.settings.timeout_s, env_extra=spec.env, bridge_port=spec.bridge_port)
        return Ran(outcome.process, outcome.log, {**outcome.result, "max_iterations": spec.request["max_iterations"]})

    def outcome(self, job: Job, state: Installed, ran: Ran, summary: BridgeSummary) -> Outcome:
        result = ran.reply
        metadata = {"openhands_agent_state": result.get("agent_state"),
                    "openhands_iterations": result.get("iterations"),
                    "openhands_max_iterations": result.get("max_iterations"),
                    "replayed_actions": state.replayed}
        if result.get("error"):
            return Outcome("failed", f"the runner failed: {result['error']}", metadata=metadata)
        if result.get("supplied_observations") != len(job.plan.calls):
            return Outcome("failed", f"replayed {result.get('supplied_observations')} of {len(job.plan.calls)} prefix "
                                     "calls", ErrorKind.CONTINUATION, metadata)
        last_error = str(result.get("last_error") or "")
        if MAX_ITERATION_ERROR in last_error:
            return Outcome("max_steps", metadata=metadata)
        if result.get("agent_state") != "finished" and not summary.budget_reached:
            return Outcome("failed", f"ended in state {result.get('agent_state')!r}: {last_error or 'no error'}",
                           metadata=metadata)
        return Outcome("completed", metadata=metadata)

    def collect(self, job: Job, state: Installed, ran: Ran, outcome: Outcome,
                summary: BridgeSummary) -> Collected:
        from forkpoint.adapters.openhands.parse import parse_events

        path = job.continued_dir / job.prefix.path.name
        try:
            write_atomic(path, read_sandbox_file(state.work, state.saved, kind=ErrorKind.CONTINUATION,
                                                 what="the continued OpenHands trajectory"))
            continued = parse_events(path)
        except (OSError, ReplayError) as error:
            raise ReplayError(ErrorKind.CONTINUATION, f"the continued OpenHands trajectory is unusable: {error}") \
                from None
        return Collected(path, summary.validated, shell.next_action_at(continued.next_actions, job.plan.after_step))
