"""Parse an OpenHands SDK (V1) conversation into the neutral Trajectory (pure but for bounded, link-refusing reads).

Input (measured on the real 1.58.2, see docs/adapters/openhands-sdk.md): a persisted conversation folder
``<persistence_dir>/<id hex>/`` given by its ``base_state.json`` (the conversation: id, the agent with its LLM and
tool specs, the LocalWorkspace's ``working_dir``), with ``events/event-NNNNN-<event id>.json`` beside it, one
event per file, NNNNN its position in the log; or forkpoint's own bundle of the same (``BUNDLE``: the prefixes
and continued conversations forkpoint writes). Event ``kind``s: ``SystemPromptEvent`` (the system prompt and the
tool definitions), ``MessageEvent`` (``llm_message``; source user or agent), ``ActionEvent`` (``tool_name``,
``tool_call_id``, ``tool_call`` as the model sent it, ``action`` as the SDK parsed it, ``thought``,
``llm_response_id``), then per call an ``ObservationEvent`` (``action_id``, ``observation``), an
``AgentErrorEvent`` or a ``UserRejectObservation``, plus bookkeeping (state updates, condensations...). The actions
of one model response come first, then their observations (A A O O). A batch is every ActionEvent sharing an
``llm_response_id``; ``finish`` ends the conversation (it has an observation, but no boundary follows it).

The historical observation of a call is the tool message text the model saw (``format.model_text``).
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters.kit.ids import UUID
from forkpoint.adapters.kit.jsondoc import as_object, as_text, load_json_document, loads_record
from forkpoint.adapters.openhands_sdk.format import OBSERVATION_KINDS, is_error, model_text
from forkpoint.adapters.openhands_sdk.spec import BUNDLE
from forkpoint.core.errors import trajectory
from forkpoint.core.fs import (
    DEFAULT_MAX_INPUT_BYTES,
    ConfinementError,
    InputTooLargeError,
    NotRegularFileError,
    read_file_strict,
)
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import ActionSignature, Batch, CallPolicy, JsonObject, Observation, ToolCall, Trajectory

AGENT = "openhands-sdk"
BASE_STATE = "base_state.json"
EVENTS_DIR = "events"
#: openhands.sdk.conversation.persistence_const.EVENT_NAME_RE (ids are uuid4 strings; 64 bounds a hostile one)
EVENT_NAME = re.compile(r"event-(?P<idx>\d{5,9})-(?P<event_id>[0-9a-fA-F-]{8,64})\.json")
EVENT_ID = re.compile(r"[0-9a-fA-F-]{8,64}")
#: tools whose SDK implementation re-runs them in the workspace (runner.py ``replay``)
FRESH_TOOLS = frozenset({"terminal", "file_editor", "task_tracker", "think"})
STALE_TOOLS = {
    "browser_navigate": "browsing reaches the web, which changes over time",
    "browser_use": "browsing reaches the web, which changes over time",
    "delegate": "a delegated sub-agent cannot be replayed",
    "task": "a sub-agent task cannot be replayed",
}
TERMINAL_TOOLS = frozenset({"finish"})
MAX_EVENT_FILES = 100_000


@dataclass(frozen=True)
class SdkNative:
    base_state: JsonObject
    events: tuple[JsonObject, ...]
    #: per batch: the log positions of its ActionEvents and of their observation events
    batch_actions: tuple[tuple[int, ...], ...]
    batch_observations: tuple[tuple[int, ...], ...]


def parse_conversation(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory[SdkNative]:
    data, sha256 = load_json_document(path, "OpenHands SDK conversation", max_bytes)
    if not isinstance(data, dict):
        raise trajectory("an OpenHands SDK conversation is its base_state.json (or forkpoint's bundle): a JSON object")
    if data.get("schema") == BUNDLE:
        base_state, events = as_object(data.get("base_state")), data.get("events")
        if not isinstance(events, list):
            raise trajectory("the OpenHands SDK bundle has no events list")
    else:
        base_state = data
        events, sha256 = _read_events(path.parent, max_bytes - path.stat().st_size, sha256)
    return from_events(path, sha256, base_state, events)


def _read_events(folder: Path, budget: int, base_sha256: str) -> tuple[list[Any], str]:
    """``events/event-NNNNN-<id>.json`` in log order: regular files only (no link followed, below the conversation
    folder either), names in the SDK's shape, positions 0..n-1 without a gap, at most ``budget`` bytes in all."""
    events_dir = folder / EVENTS_DIR
    try:
        st = os.lstat(events_dir)
    except OSError as error:
        raise trajectory(f"the OpenHands SDK conversation has no readable {events_dir}: {error.strerror}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise trajectory(f"{events_dir} is not a directory (a link or a special file is refused)")
    named: dict[int, str] = {}
    with os.scandir(events_dir) as entries:
        for count, entry in enumerate(entries):
            if count >= MAX_EVENT_FILES:
                raise trajectory(f"{events_dir} holds more than {MAX_EVENT_FILES} entries")
            match = EVENT_NAME.fullmatch(entry.name)
            if match is None:
                continue  # the SDK's lock and length-marker files, anything else
            index = int(match["idx"])
            if index in named:
                raise trajectory(f"two OpenHands SDK events at position {index}: {named[index]}, {entry.name}")
            named[index] = entry.name
    if sorted(named) != list(range(len(named))):
        raise trajectory(f"the OpenHands SDK event files in {events_dir} are not numbered 0..{len(named) - 1}")
    events: list[Any] = []
    digest = [base_sha256]
    for index in range(len(named)):
        name = named[index]
        try:
            raw = read_file_strict(folder, f"{EVENTS_DIR}/{name}", max_bytes=max(budget, 0))
        except InputTooLargeError:
            raise trajectory(f"the OpenHands SDK conversation exceeds the input limit at {name}") from None
        except (OSError, NotRegularFileError, ConfinementError) as error:
            raise trajectory(f"cannot read the OpenHands SDK event {name}: {error}") from None
        budget -= len(raw)
        try:
            event = loads_record(raw)
        except orjson.JSONDecodeError as error:
            raise trajectory(f"the OpenHands SDK event {name} is not valid JSON: {error}") from None
        if not isinstance(event, dict) or event.get("id") != EVENT_NAME.fullmatch(name)["event_id"]:  # type: ignore[index]
            raise trajectory(f"the OpenHands SDK event {name} does not hold the event its name says")
        events.append(event)
        digest.append(sha256_hex(raw))
    return events, sha256_hex("\n".join(digest).encode())


def from_events(path: Path, sha256: str, base_state: JsonObject, raw_events: list[Any]) -> Trajectory[SdkNative]:
    conversation_id = base_state.get("id")
    if not isinstance(conversation_id, str) or not UUID.fullmatch(conversation_id):
        raise trajectory("the OpenHands SDK conversation has no UUID id in base_state.json")
    if not raw_events:
        raise trajectory("the OpenHands SDK conversation has no events")
    events = _checked(raw_events)
    by_call = _observations(events)
    groups, refusals = _groups(events)
    batches: list[Batch] = []
    batch_actions: list[tuple[int, ...]] = []
    batch_observations: list[tuple[int, ...]] = []
    for group in groups:
        calls, observed = [], []
        for index in group:
            observation = by_call.get(str(events[index].get("tool_call_id")))
            calls.append(_call(events[index], index, events[observation] if observation is not None else None))
            if observation is not None:
                observed.append(observation)
        batches.append(Batch(len(batches) + 1, tuple(calls), f"event:{group[0]}", len(observed) == len(group),
                             native=tuple(group)))
        batch_actions.append(tuple(group))
        batch_observations.append(tuple(observed))
    turns = _turns(events)
    next_actions: list[ActionSignature | None] = [turns[0][1] if turns else None]
    for group in groups:
        later = [signature for first, signature in turns if first > group[-1]]
        next_actions.append(later[0] if later else None)
    native = SdkNative(base_state, tuple(events), tuple(batch_actions), tuple(batch_observations))
    workspace = as_text(as_object(base_state.get("workspace")).get("working_dir")) or None
    return Trajectory.recorded(AGENT, None, path, sha256, session_id=conversation_id,
                               cwd=os.path.normpath(workspace) if workspace else None, batches=batches,
                               next_actions=next_actions, boundary_refusals=refusals, native=native)


def _checked(data: list[Any]) -> list[JsonObject]:
    seen: set[str] = set()
    for index, event in enumerate(data):
        if not isinstance(event, dict) or not isinstance(event.get("kind"), str):
            raise trajectory(f"OpenHands SDK event {index} is not an event object with a kind")
        event_id = event.get("id")
        if not isinstance(event_id, str) or not EVENT_ID.fullmatch(event_id):
            raise trajectory(f"OpenHands SDK event {index} has no id of the SDK's shape (hex and dashes)")
        if event_id in seen:
            raise trajectory(f"duplicate OpenHands SDK event id {event_id}")
        seen.add(event_id)
    return data


def _observations(events: list[JsonObject]) -> dict[str, int]:
    found: dict[str, int] = {}
    for index, event in enumerate(events):
        if event["kind"] in OBSERVATION_KINDS:
            call_id = event.get("tool_call_id")
            if not isinstance(call_id, str):
                raise trajectory(f"OpenHands SDK observation {index} names no tool call")
            if call_id in found:
                raise trajectory(f"OpenHands SDK tool call {call_id} has more than one observation")
            found[call_id] = index
    return found


def _is_action(event: JsonObject) -> bool:
    return bool(event["kind"] == "ActionEvent")


def _groups(events: list[JsonObject]) -> tuple[list[list[int]], dict[int, str]]:
    """Tool ActionEvents grouped by model response (``llm_response_id``); finish is no batch."""
    groups: list[list[int]] = []
    refusals: dict[int, str] = {}
    current: object = None
    for index, event in enumerate(events):
        if not _is_action(event):
            if event["kind"] == "MessageEvent":
                current = None
            continue
        rid = event.get("llm_response_id")
        if event.get("tool_name") in TERMINAL_TOOLS:
            if groups and rid == current:
                refusals[len(groups)] = f"batch {len(groups)}'s model response also finished the conversation"
            current = rid
            continue
        if isinstance(rid, str) and rid == current and groups:
            groups[-1].append(index)
        else:
            groups.append([index])
        current = rid
    return groups, refusals


def tool_arguments(event: JsonObject) -> JsonObject:
    """The arguments as the model sent them (``tool_call.arguments`` parsed)."""
    raw = as_object(event.get("tool_call")).get("arguments")
    try:
        value = orjson.loads(raw) if isinstance(raw, str) else raw
    except orjson.JSONDecodeError:
        return {"_raw_arguments": raw}
    return value if isinstance(value, dict) else {"_raw_arguments": raw}


def _call(event: JsonObject, index: int, observation: JsonObject | None) -> ToolCall:
    call_id = event.get("tool_call_id")
    if not isinstance(call_id, str) or not call_id:
        raise trajectory(f"OpenHands SDK action {index} has no tool_call_id")
    name = as_text(event.get("tool_name"), "?")
    historical = Observation(model_text(observation), is_error=is_error(observation)) if observation else None
    policy, reason = CallPolicy.FRESH, None
    listed = CallPolicy.listed(name, FRESH_TOOLS, STALE_TOOLS)
    if event.get("action") is None and observation is not None and observation["kind"] == "AgentErrorEvent":
        pass  # the SDK refused the call (unknown tool, invalid arguments): its own validation runs again
    elif not isinstance(event.get("action"), dict):
        policy, reason = CallPolicy.REFUSED, "the call has no action and no AgentErrorEvent answering it"
    elif listed is not None:
        policy, reason = listed
    else:
        policy, reason = CallPolicy.REFUSED, f"forkpoint does not know the OpenHands SDK tool {name!r}"
    return ToolCall(call_id, name, tool_arguments(event), historical, policy, reason, native=index)


def _turns(events: list[JsonObject]) -> list[tuple[int, ActionSignature]]:
    """Agent turns in log order (first position, signature): the actions of one response, or an agent message."""
    turns: list[tuple[int, list[JsonObject]]] = []
    current: object = None
    for index, event in enumerate(events):
        if event["kind"] == "MessageEvent" and event.get("source") == "agent":
            turns.append((index, [event]))
            current = None
        elif _is_action(event):
            rid = event.get("llm_response_id")
            if isinstance(rid, str) and rid == current and turns:
                turns[-1][1].append(event)
            else:
                turns.append((index, [event]))
            current = rid
    return [(first, _signature(group)) for first, group in turns]


def _signature(group: list[JsonObject]) -> ActionSignature:
    first = group[0]
    if first["kind"] == "MessageEvent":
        message = as_object(first.get("llm_message"))
        return ActionSignature(_joined(message.get("content")), as_text(message.get("reasoning_content")), ())
    return ActionSignature(_joined(first.get("thought")), as_text(first.get("reasoning_content")),
                           tuple((as_text(e.get("tool_name")), tool_arguments(e)) for e in group))


def _joined(parts: Any) -> str:
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict)) if isinstance(parts, list) else ""
