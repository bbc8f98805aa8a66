"""OpenHands native files for a plan (pure builders + atomic writes).

* The prefix trajectory (``native/prefix/<name>.json``): the recorded events through batch N's last observation,
  in OpenHands' own ``save_trajectory_path`` format; rebuilt = the same events with each replayed call's
  observation event replaced by the fresh one (content, extras, success; ids, causes and metadata kept).
* The ReplayManager input: ``load_replay_log`` requires the user task message first, so the leading ``system``
  event is dropped (OpenHands writes it again itself); ``recall`` actions are dropped too (the memory issues a
  fresh one for the task message, a replayed copy would duplicate it); observations are left out (ReplayManager
  skips them: the runtime produces fresh ones). What remains is the task message and every agent action through
  batch N, each with its original ``tool_call_metadata`` (so the model later sees the original call ids).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path

from forkpoint.adapters.openhands.parse import OpenHandsNative
from forkpoint.core.errors import trajectory
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import FreshObservation, JsonObject, Plan
from forkpoint.core.results import write_atomic

#: observation fields the fresh run decides; everything else (id, cause, tool_call_metadata...) is kept
FRESH_FIELDS = ("observation", "content", "extras", "success", "message")


def _native(plan: Plan[OpenHandsNative]) -> OpenHandsNative:
    native = plan.trajectory.native
    return native


def prefix_end(plan: Plan[OpenHandsNative]) -> int:
    """Stream id of the last observation of batch N (the prefix ends there)."""
    observed = _native(plan).batch_observations[plan.after_step - 1]
    if not observed:
        raise trajectory(f"batch {plan.after_step} has no recorded observation")
    return max(observed)


def prefix_events(plan: Plan[OpenHandsNative], fresh: Mapping[str, FreshObservation] | None) -> list[JsonObject]:
    native = _native(plan)
    end = prefix_end(plan)
    selected = {event_id for batch in native.batch_observations[: plan.after_step] for event_id in batch}
    later = {event_id for batch in native.batch_actions[plan.after_step:] for event_id in batch}
    kept = [e for e in native.events if e["id"] <= end and e["id"] not in later]
    if fresh is None:
        return kept  # only serialised: the parsed events are not copied
    by_cause = {call.native: fresh.get(call.call_id) for call in plan.calls}
    events: list[JsonObject] = []
    for event in kept:
        if event["id"] not in selected:
            events.append(event)
            continue
        event = dict(event)  # only top-level fields are replaced
        events.append(event)
        observation = by_cause.get(event.get("cause"))
        if observation is None or not isinstance(observation.native, dict):
            raise trajectory(f"no fresh OpenHands observation for action {event.get('cause')}")
        for key in FRESH_FIELDS:
            if key in observation.native:
                event[key] = observation.native[key]
            else:
                event.pop(key, None)
    return events


def replay_input(plan: Plan[OpenHandsNative]) -> list[JsonObject]:
    """The ReplayManager input for batches 1..N (see the module docstring)."""
    native = _native(plan)
    end = max(native.batch_actions[plan.after_step - 1])
    task = next((e for e in native.events if e.get("source") == "user" and e.get("action") == "message"), None)
    if task is None:
        raise trajectory("the OpenHands trajectory has no user task message (ReplayManager needs it first)")
    events = [copy.deepcopy(task)]
    for event in native.events:
        if event["id"] > end:
            break
        if event is task or not isinstance(event.get("action"), str):
            continue
        if event.get("action") in ("system", "recall") or event.get("source") == "environment":
            # ReplayManager drops ENVIRONMENT events (a GUI session's change_agent_state): counted as a step, the
            # controller would take one step more than it replays and call the model
            continue
        events.append(copy.deepcopy(event))
    return events


def replayed_action_count(events: list[JsonObject]) -> int:
    """Controller steps the replay takes: every action after the task message."""
    return sum(1 for event in events[1:] if isinstance(event.get("action"), str))


def write_events(events: list[JsonObject], destination: Path) -> str:
    payload = json.dumps(events, indent=4).encode("utf-8")
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(destination, payload)
    return sha256_hex(payload)
