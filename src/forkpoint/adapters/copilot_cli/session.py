"""Write a Copilot CLI session-state event log cut after batch N (pure line building + one atomic write).

Measured on 1.0.102 (docs/adapters/copilot-cli.md): ``copilot --resume=<id>`` reads
``$COPILOT_HOME/session-state/<id>/events.jsonl`` alone (the directory's other files are recreated) and sends the
conversation rebuilt from its ``user.message``, ``assistant.message`` and ``tool.execution_complete`` events. The
rebuilt log is every recorded event up to the last completion of batch N, in order; each prefix call's completion
carries the fresh observation (historical for the prepared prefix) where the CLI reads it: a success's
``result.content`` (the UI-only ``result.detailedContent`` dropped), a failure's ``error.message``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path

from forkpoint.adapters.copilot_cli.parse import CopilotNative, dumps
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import FreshObservation, JsonObject, Plan
from forkpoint.core.results import write_atomic

#: the rebuilt log's name in the run dir (installed as session-state/<id>/events.jsonl for a resume)
FILE_NAME = "events.jsonl"


def completion_data(recorded: JsonObject, observation: FreshObservation) -> JsonObject:
    """A ``tool.execution_complete`` data object with ``observation`` where the CLI reads it."""
    data = dict(recorded)
    native = observation.native if isinstance(observation.native, dict) else {}
    text = observation.content if isinstance(observation.content, str) else str(observation.content)
    data.pop("result", None)
    data.pop("error", None)
    data["success"] = not observation.is_error
    if observation.is_error:
        error = native.get("error")
        code = error.get("code") if isinstance(error, dict) else None
        data["error"] = {"message": text, "code": code if isinstance(code, str) else "failure"}
    else:
        data["result"] = {"content": text}
    shell = native.get("shellExecution")
    if isinstance(shell, dict):
        data["shellExecution"] = shell
    return data


def prefix_events(plan: Plan, fresh: Mapping[str, FreshObservation] | None) -> list[JsonObject]:
    """The events up to the last completion of batch N; with ``fresh``, every prefix completion replaced."""
    native: CopilotNative = plan.trajectory.native
    events = copy.deepcopy(native.events[: native.batch_end[plan.after_step - 1] + 1])
    if fresh is None:
        return events
    prefix_ids = {call.call_id for call in plan.calls}
    for event in events:
        data = event["data"]
        if event["type"] == "tool.execution_complete" and data.get("toolCallId") in prefix_ids:
            event["data"] = completion_data(data, fresh[str(data["toolCallId"])])
    return events


def write_session(plan: Plan, fresh: Mapping[str, FreshObservation] | None, destination: Path) -> str:
    data = b"".join(dumps(event) + b"\n" for event in prefix_events(plan, fresh))
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(destination, data)
    return sha256_hex(data)
