"""Write the native prefix trajectory (pure build + one atomic write).

The prefix keeps the recording's object (``info`` with its ``config``, ``trajectory_format``) and its messages
through batch N: system + task verbatim, every non-batch message between batches verbatim (format-error turns,
interrupts), each batch's assistant message verbatim, then its observations: historical ones for
``--prepare-only``, the companion's freshly formatted native observation messages otherwise. ``info`` says the
run is unfinished (no exit status, no submission) and counts the prefix's model calls.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from forkpoint.adapters.mini_swe_agent.parse import MiniNative
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import FreshObservation, JsonObject, Plan
from forkpoint.core.results import write_atomic


def _native(plan: Plan[MiniNative]) -> MiniNative:
    native = plan.trajectory.native
    return native


def _document(native: MiniNative, messages: list[JsonObject], after_step: int) -> JsonObject:
    data: JsonObject = {key: value for key, value in native.data.items() if key != "messages"}
    info = data.get("info", {})
    if isinstance(info, dict):  # the fields a finished run sets, copied (the parsed document stays as read)
        unset: Any = "" if native.major >= 2 else None
        info = data["info"] = {**info, "exit_status": unset, "submission": unset}
        stats = info.get("model_stats")
        if isinstance(stats, dict):
            info["model_stats"] = {**stats, "api_calls": native.prefix_calls(after_step)}
    data["messages"] = messages
    return data


def prepared_messages(plan: Plan[MiniNative]) -> list[JsonObject]:
    native = _native(plan)
    return native.messages[: native.batch_end(plan.after_step)]  # only serialised: no copy


def rebuilt_messages(plan: Plan[MiniNative], fresh: Mapping[str, FreshObservation]) -> list[JsonObject]:
    native = _native(plan)
    source = native.messages
    messages = copy.deepcopy(source[:2])
    position = 2
    for batch in plan.batches:
        assistant = batch.native["message_index"]
        messages.extend(copy.deepcopy(source[position: assistant + 1]))
        for offset, call in enumerate(batch.calls):
            observation = fresh[call.call_id]
            message = observation.native.get("message") if isinstance(observation.native, dict) else None
            if message is None:  # a reused (stale) observation: the historical message as recorded
                message = copy.deepcopy(source[assistant + 1 + offset])
            messages.append(message)
        position = batch.native["end"]
    return messages


def write(plan: Plan[MiniNative], messages: list[JsonObject], destination: Path) -> str:
    """Write the prefix document the way mini-swe-agent writes trajectories (``json.dumps(indent=2)``)."""
    data = json.dumps(_document(_native(plan), messages, plan.after_step), indent=2).encode("utf-8")
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(destination, data)
    return sha256_hex(data)
