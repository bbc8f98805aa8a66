"""OpenHands SDK native files for a plan (pure builders + atomic writes).

* The prefix (``native/prefix/<conversation id>.json``): forkpoint's bundle of the SDK conversation
  (``{"schema": BUNDLE, "base_state": ..., "events": [...]}``): the recorded events through batch N's last
  observation; rebuilt = each replayed call's observation event replaced by the fresh one the SDK's own tool
  produced (its id, parent_id and timestamp kept, so the event tree and the action links stay intact).
  ``base_state`` is the recorded one with ``execution_status`` ``idle`` and ``leaf_event_id`` the prefix's last
  event: the state the SDK itself leaves after a step that did not finish.
* The conversation folder the SDK resumes (``materialise``): ``<root>/<id hex>/base_state.json`` (its
  ``persistence_dir`` set to that folder), ``events/event-NNNNN-<id>.json`` and, when the prefix planned tasks,
  ``TASKS.json`` (the task tracker's file: the last fresh ``plan``'s task list, as the SDK writes it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from forkpoint.adapters.openhands_sdk.parse import EVENT_ID, SdkNative
from forkpoint.adapters.openhands_sdk.spec import BUNDLE
from forkpoint.core.errors import trajectory
from forkpoint.core.fs import make_dirs_strict, write_file_strict
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import FreshObservation, JsonObject, Plan
from forkpoint.core.results import write_atomic

#: fields of a recorded observation event kept when the fresh one replaces it
KEPT_FIELDS = ("id", "parent_id", "timestamp")


def prefix_end(plan: Plan[SdkNative]) -> int:
    """Log position of the last observation of batch N (the prefix ends there)."""
    observed = plan.trajectory.native.batch_observations[plan.after_step - 1]
    if not observed:
        raise trajectory(f"batch {plan.after_step} has no recorded observation")
    return max(observed)


def prefix_events(plan: Plan[SdkNative], fresh: Mapping[str, FreshObservation] | None) -> list[JsonObject]:
    native = plan.trajectory.native
    end = prefix_end(plan)
    later = {index for batch in native.batch_actions[plan.after_step:] for index in batch}
    kept = [(index, event) for index, event in enumerate(native.events[:end + 1]) if index not in later]
    if fresh is None:
        return [event for _, event in kept]
    replaced: dict[int, FreshObservation | None] = {}
    for batch in native.batch_observations[:plan.after_step]:
        for index in batch:
            replaced[index] = None
    by_call = {call.call_id: call for call in plan.calls}
    for index in replaced:
        call = by_call.get(str(native.events[index].get("tool_call_id")))
        replaced[index] = fresh.get(call.call_id) if call is not None else None
    events: list[JsonObject] = []
    for index, event in kept:
        if index not in replaced:
            events.append(event)
            continue
        observation = replaced[index]
        if observation is not None and observation.native is None and (observation.stale_reused
                                                                       or observation.reused):
            events.append(event)  # the recorded observation, reused (stale by opt-in, or by design)
            continue
        if observation is None or not isinstance(observation.native, dict):
            raise trajectory(f"no fresh OpenHands SDK observation for call {event.get('tool_call_id')}")
        new = dict(observation.native)
        for key in KEPT_FIELDS:
            if key in event:
                new[key] = event[key]
        if new.get("tool_call_id") != event.get("tool_call_id"):
            raise trajectory(f"the fresh observation of {event.get('tool_call_id')} answers another call")
        events.append(new)
    return events


def prefix_base_state(plan: Plan[SdkNative], events: list[JsonObject]) -> JsonObject:
    return {**plan.trajectory.native.base_state, "execution_status": "idle", "leaf_event_id": events[-1]["id"]}


def bundle(plan: Plan[SdkNative], fresh: Mapping[str, FreshObservation] | None) -> JsonObject:
    events = prefix_events(plan, fresh)
    return {"schema": BUNDLE, "base_state": prefix_base_state(plan, events), "events": events}


def write_bundle(document: JsonObject, destination: Path) -> str:
    payload = json.dumps(document, indent=1).encode("utf-8")
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(destination, payload)
    return sha256_hex(payload)


def task_list(events: list[JsonObject]) -> list[object] | None:
    """The task tracker's list after the prefix: the last successful ``plan`` observation's ``task_list``."""
    found = None
    for event in events:
        observation = event.get("observation")
        if (event.get("kind") == "ObservationEvent" and isinstance(observation, dict)
                and observation.get("kind") == "TaskTrackerObservation" and observation.get("command") == "plan"
                and not observation.get("is_error") and isinstance(observation.get("task_list"), list)):
            found = observation["task_list"]
    return found


def materialise(document: JsonObject, root: Path) -> Path:
    """The SDK's persisted conversation for a bundle, below ``root`` (no link followed: ``root`` is the run's
    state dir); returns the conversation folder. Ids are re-checked: they become file names."""
    base_state = dict(document["base_state"])
    conversation_id = str(base_state["id"])
    folder_name = conversation_id.replace("-", "")
    if not EVENT_ID.fullmatch(conversation_id) or not folder_name.isalnum():
        raise trajectory("the OpenHands SDK conversation id is not a UUID")
    events = document["events"]
    for index, event in enumerate(events):  # every id checked before anything is written
        event_id = event.get("id")
        if not isinstance(event_id, str) or not EVENT_ID.fullmatch(event_id):
            raise trajectory(f"OpenHands SDK event {index} has no id of the SDK's shape")
    folder = root / folder_name
    make_dirs_strict(root, f"{folder_name}/events")
    base_state["persistence_dir"] = str(folder)
    for index, event in enumerate(events):
        event_id = event["id"]
        write_file_strict(root, f"{folder_name}/events/event-{index:05d}-{event_id}.json",
                          json.dumps(event).encode("utf-8"))
    write_file_strict(root, f"{folder_name}/base_state.json", json.dumps(base_state).encode("utf-8"))
    tasks = task_list(events)
    if tasks is not None:
        write_file_strict(root, f"{folder_name}/TASKS.json", json.dumps(tasks, indent=2).encode("utf-8"))
    return folder
