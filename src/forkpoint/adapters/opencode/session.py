"""Write the OpenCode session cut after batch N as an ``opencode export`` JSON (pure apart from the write).

The cut keeps every message up to and including the assistant message holding batch N, with all its parts
(``step-start``, ``reasoning``, ``text``, the tool parts, ``step-finish``), in OpenCode's storage order (part id).
The session info keeps its id, title and ``permission`` (without it OpenCode offers an extra ``question`` tool).
A rebuilt cut replaces each selected tool part's state with the fresh one OpenCode itself produced (status,
output or error, metadata, title, time); the recorded input is kept. ``opencode import`` loads this file.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters.opencode.parse import OcNative
from forkpoint.core.errors import trajectory
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import FreshObservation, JsonObject, Plan
from forkpoint.core.results import write_atomic

STATE_KEYS = ("status", "input", "output", "error", "metadata", "title", "time")


def native_of(plan: Plan) -> OcNative:
    native = plan.trajectory.native
    if not isinstance(native, OcNative):
        raise trajectory("not an OpenCode trajectory")
    return native


def require_export(native: OcNative) -> JsonObject:
    """Rebuilding needs the full record: the session info and the user prompt are not in a run's event log."""
    if native.form != "export" or native.session is None or not native.prompt_known:
        session = (native.session or {}).get("id") or "<session id>"
        raise trajectory("an `opencode run --format=json` event log holds neither the user prompt nor the session "
                         f"(version, permission); pass the session's export as --opencode-export FILE "
                         f"(`opencode export {session} > FILE`) or replay that export itself")
    return native.session


def cut_export(plan: Plan, fresh: Mapping[str, FreshObservation] | None) -> JsonObject:
    """The export JSON of the session cut after batch ``plan.after_step`` (fresh states when given)."""
    native = native_of(plan)
    info = require_export(native)
    if plan.after_step < 1 or plan.after_step > len(native.batch_message):
        raise trajectory(f"batch {plan.after_step} does not exist")
    last = native.batch_message[plan.after_step - 1]
    selected = {call.call_id for call in plan.calls}
    replaced: set[str] = set()
    messages = []
    for message in native.messages[: last + 1]:
        parts = []
        for part in message.parts:
            call_id = native.call_ids.get(str(part.get("id")))
            if fresh is not None and part.get("type") == "tool" and call_id in selected:
                observation = fresh.get(call_id)
                if observation is None:
                    raise trajectory(f"no fresh observation for selected call {call_id}")
                part = {**part, "state": fresh_state(part["state"], observation)}
                replaced.add(call_id)
            parts.append(copy.deepcopy(part))
        messages.append({"info": copy.deepcopy(message.info), "parts": parts})
    if fresh is not None and replaced != selected:
        raise trajectory(f"the rebuilt session did not replace every selected call: {sorted(selected - replaced)}")
    return {"info": copy.deepcopy(info), "messages": messages}


def fresh_state(historical: JsonObject, observation: FreshObservation) -> JsonObject:
    """The tool state OpenCode wrote for the fresh run (a reused stale observation keeps the recorded state)."""
    if observation.stale_reused or not isinstance(observation.native, dict):
        return copy.deepcopy(historical)
    state: dict[str, Any] = {key: observation.native[key] for key in STATE_KEYS if key in observation.native}
    state["input"] = copy.deepcopy(historical.get("input", {}))
    return state


def write_export(export: JsonObject, destination: Path) -> str:
    payload = orjson.dumps(export, option=orjson.OPT_INDENT_2) + b"\n"
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(destination, payload)
    return sha256_hex(payload)
