"""Re-run the prefix's OpenHands SDK tool calls with the SDK's own tools (runner.py ``replay``), in the workspace.

All fresh calls of the prefix run in ONE runner process, started at the first call (``run`` of the later calls
returns what that process produced): the SDK's start-up (its tmux terminal) takes seconds, and its tools keep
state between calls (the terminal's working directory, the task list). So the journal's ``tool_started`` of the
first call covers every call of the prefix (a crash in between is reported as ambiguous, never repeated
silently). The fresh observation of a call is the event the SDK's ``Agent._execute_action_event`` returned for
its recorded ActionEvent (an ObservationEvent, or an AgentErrorEvent when the tool raised).
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from forkpoint.adapters.kit.python_runner import DEAD_LLM_URL, BatchReplayExecutor
from forkpoint.adapters.openhands_sdk.format import is_error, model_text
from forkpoint.adapters.openhands_sdk.launch import read_out, run_runner, work_dir
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import CallPolicy, FreshObservation, JsonObject, ToolCall
from forkpoint.core.results import write_atomic

REPLAY_TIMEOUT_S = 1800.0


def fresh_events(produced: Any, call_ids: list[str]) -> dict[str, JsonObject]:
    """call id -> the one event the SDK produced for it (the runner's output, checked against the plan)."""
    if not isinstance(produced, list):
        raise ReplayError(ErrorKind.EXECUTOR, "the OpenHands SDK replay wrote no event list")
    found: dict[str, JsonObject] = {}
    for entry in produced:
        event = entry.get("event") if isinstance(entry, dict) else None
        call_id = event.get("tool_call_id") if isinstance(event, dict) else None
        if not isinstance(event, dict) or not isinstance(call_id, str) or call_id not in call_ids:
            raise ReplayError(ErrorKind.EXECUTOR, f"the OpenHands SDK replay answered an unknown call {call_id!r}")
        if call_id in found:
            raise ReplayError(ErrorKind.EXECUTOR, f"the OpenHands SDK produced two observations for {call_id}")
        found[call_id] = event
    missing = [call_id for call_id in call_ids if call_id not in found]
    if missing:
        raise ReplayError(ErrorKind.EXECUTOR, f"the OpenHands SDK produced no observation for {missing}")
    return found


class SdkToolExecutor(BatchReplayExecutor):
    label = "OpenHands SDK"

    def _replay(self) -> dict[str, JsonObject]:
        work = work_dir(self.context)
        native = self.plan.trajectory.native
        calls = [call for call in self.plan.calls if call.policy is CallPolicy.FRESH]
        actions = [native.events[call.native] for call in calls]
        write_atomic(work / "replay-actions.json", json.dumps(actions).encode("utf-8"))
        (work / "replay-out.json").unlink(missing_ok=True)
        request: dict[str, Any] = {
            "mode": "replay", "workspace": self.sandbox.cwd, "persistence_dir": str(work / "replay-conversations"),
            "conversation_id": str(uuid.uuid4()), "agent": native.base_state.get("agent"),
            "actions": str(work / "replay-actions.json"), "max_iterations": max(len(actions), 1),
            "out": str(work / "replay-out.json"),
            "llm": {"model": "openai/forkpoint-replay-only", "base_url": DEAD_LLM_URL, "api_key_env": "NO_KEY"},
        }
        run_runner(self.python, self.context, "replay", request, timeout_s=REPLAY_TIMEOUT_S)
        produced = read_out(work, "replay-out.json", ErrorKind.EXECUTOR, "the OpenHands SDK replay output")
        return fresh_events(produced, [call.call_id for call in calls])

    def _observation(self, call: ToolCall, event: JsonObject) -> FreshObservation:
        observation = event.get("observation")
        code = observation.get("exit_code") if isinstance(observation, dict) else None
        return FreshObservation(call.call_id, model_text(event), is_error=is_error(event),
                                return_code=code if isinstance(code, int) and code != -1 else None, native=event)
