"""Continue the real OpenHands 0.62.0 from batch N, its model traffic behind the fail-closed bridge.

The runner (mode ``continue``) starts OpenHands' own ``run_controller`` on the CLI runtime in the workspace with
the ReplayManager input of batches 1..N. The replayed actions are NOT executed again (the workspace already holds
their effects from the replay stage): the runtime answers each with the fresh observation forkpoint recorded for
that tool call id, so OpenHands' history holds exactly O'1..O'N. When the replay queue is empty the agent calls
the model: litellm -> the bridge -> the gate (the first request must be exactly the rebuilt conversation, see
gate.py) -> the upstream. ``max_iterations`` = the replayed actions + the remaining step budget; the bridge also
answers model requests past the budget with an error.
"""

from __future__ import annotations

import json
from typing import Any

from forkpoint.adapters.openhands.expected import PrefixError, expected_messages
from forkpoint.adapters.openhands.gate import PROFILE
from forkpoint.adapters.openhands.launch import BRIDGE_KEY_ENV, run_runner, work_dir
from forkpoint.adapters.openhands.parse import parse_events
from forkpoint.adapters.openhands.session import replay_input, replayed_action_count, write_events
from forkpoint.bridge.protocols import make_upstream
from forkpoint.bridge.protocols.openai_chat import ChatGate, ExpectedChat
from forkpoint.bridge.server import Bridge
from forkpoint.bridge.upstream import Upstream
from forkpoint.errors import ErrorKind, ReplayError, classify_continuation_output
from forkpoint.fs import read_sandbox_file
from forkpoint.ids import safe_file_stem
from forkpoint.model import Continuation, ContinueSettings, JsonObject, NativePrefix, Plan, RunContext
from forkpoint.results import write_atomic

DEFAULT_LIVE_STEPS = 100
MAX_ITERATION_ERROR = "Agent reached maximum iteration"
BRIDGE_KEY = "forkpoint-bridge"
#: the boundary prompt reaches the runner only through its environment (never a file forkpoint writes)
PROMPT_ENV = "FORKPOINT_BOUNDARY_PROMPT"


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


def continue_events(
    plan: Plan, prefix: NativePrefix, context: RunContext, settings: ContinueSettings
) -> Continuation:
    events = json.loads(prefix.path.read_text("utf-8"))
    prompt = settings.boundary_prompt or None
    try:
        messages = expected_messages(events)
        if prompt is not None:
            messages.append({"role": "user", "text": prompt})
        expected = ExpectedChat.of(plan.profile, messages)
    except PrefixError as error:
        raise ReplayError(ErrorKind.CONTINUATION, f"cannot build the expected first request: {error}") from None
    work = work_dir(context)
    write_atomic(work / "expected-prefix.json", json.dumps(expected.to_json(), indent=2).encode())
    replay = replay_input(plan)
    replay_path = work / "continue-replay-events.json"
    write_events(replay, replay_path)
    fresh_path = work / "fresh-observations.json"
    write_events(supplied_observations(plan, events), fresh_path)
    saved = work / "continued-trajectory.json"
    live = settings.remaining_steps if settings.remaining_steps is not None else DEFAULT_LIVE_STEPS
    replayed = replayed_action_count(replay) + (1 if prompt is not None else 0)
    bridge = Bridge(ChatGate(PROFILE, expected), _upstream(settings), log_path=context.state_dir / "bridge-log.jsonl",
                    max_model_requests=settings.remaining_steps)
    with bridge:
        request: dict[str, Any] = {
            "mode": "continue", "workspace": str(context.workspace), "file_store": str(work / "file-store"),
            "sid": f"forkpoint-{safe_file_stem(context.session_id or 'session')}", "save_trajectory": str(saved),
            "max_iterations": replayed + live, "replay_events": str(replay_path),
            "fresh_observations": str(fresh_path),
            **({"boundary_prompt_env": PROMPT_ENV} if prompt is not None else {}),
            "llm": {"model": f"openai/{recorded_model(events)}", "base_url": f"{bridge.base_url}/v1",
                    "api_key_env": BRIDGE_KEY_ENV},
        }
        outcome = run_runner(settings.target.entrypoint, context, "continue", request, timeout_s=settings.timeout_s,
                             env_extra={BRIDGE_KEY_ENV: BRIDGE_KEY, **({PROMPT_ENV: prompt} if prompt else {})})
        summary = bridge.finish()
    result = outcome.result
    metadata: dict[str, Any] = {"native_cli": "openhands", "model_bridge": summary.to_json(),
                                "agent_exit_code": outcome.process.returncode, "agent_log": str(outcome.log),
                                "openhands_agent_state": result.get("agent_state"),
                                "openhands_iterations": result.get("iterations"),
                                "openhands_max_iterations": request["max_iterations"],
                                "replayed_actions": replayed}
    bridge_error = summary.error()
    if bridge_error is not None and summary.first_failure is not None:
        raise ReplayError(bridge_error.kind, bridge_error.message)
    if result.get("error"):
        raise ReplayError(classify_continuation_output(outcome.tail()),
                          f"the OpenHands runner failed: {result['error']}; see {outcome.log}")
    if result.get("supplied_observations") != len(plan.calls):
        raise ReplayError(ErrorKind.CONTINUATION, f"OpenHands replayed {result.get('supplied_observations')} of "
                                                  f"{len(plan.calls)} prefix calls; see {outcome.log}")
    last_error = str(result.get("last_error") or "")
    budget = summary.budget_reached or MAX_ITERATION_ERROR in last_error
    if result.get("agent_state") != "finished" and not budget:
        raise ReplayError(classify_continuation_output(last_error + "\n" + outcome.tail()),
                          f"OpenHands ended in state {result.get('agent_state')!r}: {last_error or 'no error'}; "
                          f"see {outcome.log}")
    if bridge_error is not None:
        raise ReplayError(bridge_error.kind, f"{bridge_error.message}; see {outcome.log}")
    continued_path = context.output_dir / "native" / "continued" / prefix.path.name
    continued_path.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_atomic(continued_path, read_sandbox_file(work, saved, kind=ErrorKind.CONTINUATION,
                                                       what="the continued OpenHands trajectory"))
        continued = parse_events(continued_path)
    except (OSError, ReplayError) as error:
        raise ReplayError(ErrorKind.CONTINUATION, f"the continued OpenHands trajectory is unusable: {error}") \
            from None
    next_actions = continued.next_actions
    return Continuation(
        agent_status="max_steps" if budget else "completed",
        continued_steps=summary.validated,
        continued_path=continued_path,
        next_action=next_actions[plan.after_step] if plan.after_step < len(next_actions) else None,
        metadata=metadata,
    )


def _upstream(settings: ContinueSettings) -> Upstream:
    return make_upstream("openai-chat", settings.upstream, settings.upstream_url, settings.upstream_key)


__all__ = ["continue_events"]
