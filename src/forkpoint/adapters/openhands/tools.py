"""Re-run the prefix's OpenHands actions with OpenHands itself: ReplayManager on the CLI runtime, in the workspace.

The runner (mode ``replay``) loads the ReplayManager input (session.replay_input) with ``max_iterations`` = the
number of replayed actions, so the controller stops right after the last one, before any model call (its LLM
points at a port nothing listens on, and the runner reports the controller's state). OpenHands writes its own
trajectory; the fresh observation of each replayed call is the observation event whose ``cause`` is the replayed
action carrying that call's ``tool_call_id``.

All N batches run in ONE OpenHands process, started at the first call (``run`` of the later calls returns what
that process produced): OpenHands' start-up takes seconds, and its controller only replays a whole log. So the
journal's ``tool_started`` of the first call covers every call of the prefix (a crash in between is reported as
ambiguous, never repeated silently).
"""

from __future__ import annotations

import json
from typing import Any

from forkpoint.adapters.kit.ids import safe_file_stem
from forkpoint.adapters.kit.jsondoc import as_object
from forkpoint.adapters.kit.python_runner import DEAD_LLM_URL, BatchReplayExecutor
from forkpoint.adapters.openhands.format import model_text
from forkpoint.adapters.openhands.launch import run_runner, work_dir
from forkpoint.adapters.openhands.session import replay_input, replayed_action_count, write_events
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import read_sandbox_file
from forkpoint.core.model import FreshObservation, JsonObject, ToolCall

REPLAY_TIMEOUT_S = 1800.0
MAX_ITERATION_ERROR = "Agent reached maximum iteration"


def check_replay_input(events: list[JsonObject], call_ids: list[str]) -> None:
    """Refuse, before the runner starts anything, a ReplayManager input that would not replay exactly the plan's
    calls: OpenHands would run other actions, or step past the prefix into a model call, and the run could only
    end ambiguous."""
    replayed = [as_object(e.get("tool_call_metadata")).get("tool_call_id") for e in events[1:]
                if e.get("source") == "agent" and isinstance(e.get("action"), str)]
    ignored = [e.get("id") for e in events[1:] if e.get("source") not in ("agent", "user")]
    if replayed != call_ids or ignored:
        raise ReplayError(ErrorKind.TRAJECTORY, f"OpenHands' ReplayManager would replay the actions {replayed} "
                                                f"(events {ignored} it skips counted as steps), not the calls "
                                                f"{call_ids} of the prefix; nothing was run", before_effect=True)


def fresh_observations(events: list[JsonObject], call_ids: list[str]) -> dict[str, JsonObject]:
    """call id -> the observation event of the replayed action with that tool_call_id (the runner's trajectory)."""
    actions = {e["id"]: e for e in events if isinstance(e.get("action"), str) and e.get("source") == "agent"
               and isinstance(e.get("tool_call_metadata"), dict)}
    found: dict[str, JsonObject] = {}
    for event in events:
        action = actions.get(event.get("cause")) if isinstance(event.get("observation"), str) else None
        if action is None:
            continue
        call_id = action["tool_call_metadata"].get("tool_call_id")
        if call_id in found:
            raise ReplayError(ErrorKind.EXECUTOR, f"OpenHands produced two observations for call {call_id}")
        found[call_id] = event
    replayed = [a["tool_call_metadata"].get("tool_call_id") for a in actions.values()]
    if replayed != call_ids:
        raise ReplayError(ErrorKind.EXECUTOR, f"OpenHands replayed the calls {replayed}, expected {call_ids}")
    missing = [call_id for call_id in call_ids if call_id not in found]
    if missing:
        raise ReplayError(ErrorKind.EXECUTOR, f"OpenHands produced no observation for {missing}")
    return found


class OpenHandsToolExecutor(BatchReplayExecutor):
    label = "OpenHands"

    def _replay(self) -> dict[str, JsonObject]:
        work = work_dir(self.context)
        events = replay_input(self.plan)
        replay_path = work / "replay-events.json"
        check_replay_input(events, [call.call_id for call in self.plan.calls])
        write_events(events, replay_path)
        saved = work / "replayed-trajectory.json"
        request: dict[str, Any] = {
            "mode": "replay", "workspace": self.sandbox.cwd, "file_store": str(work / "file-store-replay"),
            "sid": f"forkpoint-replay-{safe_file_stem(self.context.session_id or 'session')}",
            "save_trajectory": str(saved),
            "max_iterations": replayed_action_count(events), "replay_events": str(replay_path),
            "llm": {"model": "openai/forkpoint-replay-only", "base_url": DEAD_LLM_URL, "api_key_env": "NO_KEY"},
        }
        outcome = run_runner(self.python, self.context, "replay", request, timeout_s=REPLAY_TIMEOUT_S)
        result = outcome.result
        if result.get("error"):
            raise ReplayError(ErrorKind.EXECUTOR, f"the OpenHands replay failed: {result['error']}; see {outcome.log}")
        last_error = str(result.get("last_error") or "")
        if result.get("iterations") != request["max_iterations"] or (last_error and MAX_ITERATION_ERROR not in
                                                                     last_error):
            raise ReplayError(ErrorKind.EXECUTOR, f"the OpenHands replay stopped after {result.get('iterations')} of "
                                                  f"{request['max_iterations']} actions ({last_error or 'no error'});"
                                                  f" see {outcome.log}")
        try:
            trajectory = json.loads(read_sandbox_file(work, saved, kind=ErrorKind.EXECUTOR,
                                                      what="the OpenHands replayed trajectory"))
        except ValueError as error:
            raise ReplayError(ErrorKind.EXECUTOR, f"the OpenHands replay wrote no readable trajectory: {error}") \
                from None
        return fresh_observations(trajectory, [call.call_id for call in self.plan.calls])

    def _observation(self, call: ToolCall, event: JsonObject) -> FreshObservation:
        native = {key: event[key] for key in ("observation", "content", "extras", "success", "message")
                  if key in event}
        metadata = event.get("extras", {}).get("metadata") if isinstance(event.get("extras"), dict) else None
        code = metadata.get("exit_code") if isinstance(metadata, dict) else None
        return FreshObservation(call.call_id, model_text(event), is_error=event.get("observation") == "error",
                                return_code=code if isinstance(code, int) else None, native=native)
