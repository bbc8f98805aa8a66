"""Parse an OpenHands 0.62.0 V0 event trajectory (``save_trajectory_path``) into the neutral Trajectory (pure).

Format (measured on the real 0.62.0, see docs/adapters/openhands.md): a JSON list of event dicts in stream order,
``id`` ints with gaps (``agent_state_changed`` observations are not in ``state.history``). Event 0 is the
``system`` action (``args.openhands_version``, ``args.tools``), then the user ``message`` (the task), a user
``recall`` and its environment ``recall`` observation (``extras.working_dir`` = the workspace). Agent actions
(``run``, ``read``, ``edit``, ``think``...) carry ``tool_call_metadata`` = ``{function_name, tool_call_id,
model_response, total_calls_in_response}``; CodeActAgent queues the calls of one model response and emits them
one per step, each followed by its observation (``cause`` = the action id): A1 O1 A2 O2. A batch is every action
sharing ``model_response.id``. ``finish`` has no observation; an agent ``message`` (text without a tool call) is
a turn without a batch.

The historical observation of a call is the text the model saw (``format.model_text``), so fresh and historical
observations are compared the way the model would see them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters.kit.jsondoc import as_object, as_text, load_json_document
from forkpoint.adapters.openhands.format import model_text
from forkpoint.core.errors import trajectory
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES
from forkpoint.core.model import ActionSignature, Batch, CallPolicy, JsonObject, Observation, ToolCall, Trajectory

AGENT = "openhands"
#: action types CodeActAgent emits for tool calls that the CLI runtime (or the controller) answers afresh
FRESH_ACTIONS = frozenset({"run", "read", "edit", "think"})
STALE_ACTIONS = {
    "browse": "browsing reaches the web, which changes over time",
    "browse_interactive": "browsing reaches the web, which changes over time",
    "call_tool_mcp": "an MCP tool call reaches a server of the original run",
    "run_ipython": "the CLI runtime has no IPython kernel",
    "task_tracking": "the task list belongs to the original run's state",
    "delegate": "a delegated sub-agent cannot be replayed",
}
TERMINAL_ACTIONS = frozenset({"finish", "reject"})
#: actions that are not tool batches (they are part of the conversation, replayed as they are)
NON_TOOL_ACTIONS = frozenset({"system", "message", "recall", "change_agent_state", "null", "condensation",
                              "condensation_request"})


@dataclass(frozen=True)
class OpenHandsNative:
    events: tuple[JsonObject, ...]
    #: per batch: the stream ids of its action events and of their observation events
    batch_actions: tuple[tuple[int, ...], ...]
    batch_observations: tuple[tuple[int, ...], ...]
    version: str | None


def parse_events(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory[OpenHandsNative]:
    data, sha256 = load_json_document(path, "OpenHands trajectory", max_bytes)
    if not isinstance(data, list):
        raise trajectory("an OpenHands V0 trajectory must be a JSON array of events")
    if not data:
        raise trajectory("the OpenHands trajectory is an empty event array")
    events = _checked(data)
    system = next((e for e in events if e.get("action") == "system"), None)
    version = None
    if system is not None and isinstance(system.get("args"), dict):
        value = system["args"].get("openhands_version")
        version = value if isinstance(value, str) else None
    observations = _observations_by_cause(events)
    groups = _groups(events)
    batches: list[Batch] = []
    batch_actions: list[tuple[int, ...]] = []
    batch_observations: list[tuple[int, ...]] = []
    next_actions: list[ActionSignature | None] = []
    complete = True
    turns = _turns(events)
    turn_of_batch: list[int] = []
    for group in groups:
        calls = []
        observed: list[int] = []
        for event in group:
            observation = observations.get(event["id"])
            calls.append(_call(event, observation))
            if observation is not None:
                observed.append(observation["id"])
        complete = complete and len(observed) == len(group)
        first = group[0]
        batches.append(Batch(len(batches) + 1, tuple(calls), f"event:{first['id']}", complete,
                             native=tuple(e["id"] for e in group)))
        batch_actions.append(tuple(e["id"] for e in group))
        batch_observations.append(tuple(observed))
        turn_of_batch.append(next(i for i, turn in enumerate(turns) if first["id"] in turn.ids))
    next_actions.append(turns[0].signature() if turns else None)
    for index in turn_of_batch:
        next_actions.append(turns[index + 1].signature() if index + 1 < len(turns) else None)
    native = OpenHandsNative(tuple(events), tuple(batch_actions), tuple(batch_observations), version)
    cwd, derived = workspace_of(events)
    return Trajectory.recorded(AGENT, version, path, sha256, session_id=path.stem, cwd=cwd,
                               batches=batches, next_actions=next_actions, boundary_refusals=_refusals(groups),
                               warnings=[derived] if derived else (), native=native)


def _checked(data: list[Any]) -> list[JsonObject]:
    seen: set[int] = set()
    for index, event in enumerate(data):
        if not isinstance(event, dict):
            raise trajectory(f"OpenHands event {index} is not an object")
        event_id = event.get("id")
        if not isinstance(event_id, int) or isinstance(event_id, bool):
            raise trajectory(f"OpenHands event {index} has no integer id")
        if event_id in seen:
            raise trajectory(f"duplicate OpenHands event id {event_id}")
        seen.add(event_id)
        if not isinstance(event.get("action"), str) and not isinstance(event.get("observation"), str):
            raise trajectory(f"OpenHands event {event_id} is neither an action nor an observation")
    return data


def _observations_by_cause(events: list[JsonObject]) -> dict[int, JsonObject]:
    found: dict[int, JsonObject] = {}
    for event in events:
        cause = event.get("cause")
        observed = isinstance(event.get("observation"), str) and event.get("source") != "environment"
        if observed and isinstance(cause, int):
            if cause in found:
                raise trajectory(f"OpenHands action {cause} has more than one observation")
            found[cause] = event
    return found


def _is_tool_action(event: JsonObject) -> bool:
    action = event.get("action")
    return (event.get("source") == "agent" and isinstance(action, str) and action not in NON_TOOL_ACTIONS
            and action not in TERMINAL_ACTIONS)


def response_id(event: JsonObject) -> str | None:
    metadata = event.get("tool_call_metadata")
    response = metadata.get("model_response") if isinstance(metadata, dict) else None
    value = response.get("id") if isinstance(response, dict) else None
    return value if isinstance(value, str) else None


def _groups(events: list[JsonObject]) -> list[list[JsonObject]]:
    """Tool actions grouped by model response (consecutive actions sharing ``model_response.id``)."""
    groups: list[list[JsonObject]] = []
    current: str | None = None
    for event in events:
        if not _is_tool_action(event):
            if event.get("source") == "agent" and isinstance(event.get("action"), str):
                current = None
            continue
        rid = response_id(event)
        if rid is not None and rid == current and groups:
            groups[-1].append(event)
        else:
            groups.append([event])
        current = rid
    return groups


def _refusals(groups: list[list[JsonObject]]) -> dict[int, str]:
    refusals: dict[int, str] = {}
    for ordinal, group in enumerate(groups, start=1):
        expected = _declared_count(group[0])
        if expected is not None and expected != len(group):
            refusals[ordinal] = (f"batch {ordinal} holds {len(group)} tool actions but its model response declared "
                                 f"{expected} (a call without an action, e.g. finish or an invalid call, is mixed in)")
    return refusals


def _declared_count(event: JsonObject) -> int | None:
    metadata = event.get("tool_call_metadata")
    value = metadata.get("total_calls_in_response") if isinstance(metadata, dict) else None
    return value if isinstance(value, int) else None


def tool_arguments(event: JsonObject) -> JsonObject:
    """The arguments the model sent for this action's tool call (its JSON string parsed), else the action args."""
    metadata = event.get("tool_call_metadata")
    call_id = metadata.get("tool_call_id") if isinstance(metadata, dict) else None
    for call in _response_calls(event):
        if call.get("id") == call_id:
            function = as_object(call.get("function"))
            raw = function.get("arguments")
            try:
                value = orjson.loads(raw) if isinstance(raw, str) else raw
            except orjson.JSONDecodeError:
                return {"_raw_arguments": raw}
            if isinstance(value, dict):
                return value
    args = event.get("args")
    return dict(args) if isinstance(args, dict) else {}


def _response_calls(event: JsonObject) -> list[JsonObject]:
    metadata = event.get("tool_call_metadata")
    response = metadata.get("model_response") if isinstance(metadata, dict) else None
    choices = response.get("choices") if isinstance(response, dict) else None
    message = choices[0].get("message") if isinstance(choices, list) and choices and isinstance(choices[0], dict) \
        else None
    calls = message.get("tool_calls") if isinstance(message, dict) else None
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _call(event: JsonObject, observation: JsonObject | None) -> ToolCall:
    metadata = event.get("tool_call_metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    call_id = metadata.get("tool_call_id")
    call_id = call_id if isinstance(call_id, str) and call_id else f"openhands-event-{event['id']}"
    name = metadata.get("function_name")
    name = name if isinstance(name, str) and name else str(event.get("action"))
    historical = None
    if observation is not None:
        historical = Observation(model_text(observation), is_error=observation.get("observation") == "error")
    action = str(event.get("action"))
    policy, reason = CallPolicy.FRESH, None
    if not metadata:
        policy, reason = CallPolicy.REFUSED, "the action has no tool_call_metadata (ReplayManager cannot replay it)"
    elif action in STALE_ACTIONS:
        policy, reason = CallPolicy.STALE, STALE_ACTIONS[action]
    elif action not in FRESH_ACTIONS:
        policy, reason = CallPolicy.REFUSED, f"forkpoint does not know the OpenHands action {action!r}"
    return ToolCall(call_id, name, tool_arguments(event), historical, policy, reason, native=event["id"])


@dataclass
class _Turn:
    """One model response (its actions) or one agent text message."""

    ids: set[int]
    events: list[JsonObject]

    def signature(self) -> ActionSignature:
        first = self.events[0]
        metadata = first.get("tool_call_metadata")
        response = metadata.get("model_response") if isinstance(metadata, dict) else None
        choices = as_object(response).get("choices")
        message = as_object(as_object(choices[0]).get("message")) if isinstance(choices, list) and choices else {}
        args = as_object(first.get("args"))
        text = as_text(message.get("content"), str(args.get("content") or args.get("thought") or ""))
        reasoning = as_text(message.get("reasoning_content"))
        tools = tuple((_name(e), tool_arguments(e)) for e in self.events if e.get("action") != "message")
        return ActionSignature(text=text, reasoning=reasoning, tools=tools)


def _name(event: JsonObject) -> str:
    metadata = event.get("tool_call_metadata")
    name = metadata.get("function_name") if isinstance(metadata, dict) else None
    return name if isinstance(name, str) else str(event.get("action"))


def _turns(events: Iterable[JsonObject]) -> list[_Turn]:
    """Agent turns in order: actions of one model response together; an agent text message alone."""
    turns: list[_Turn] = []
    current: str | None = None
    for event in events:
        action = event.get("action")
        if event.get("source") != "agent" or not isinstance(action, str) or action == "system":
            continue
        rid = response_id(event)
        if rid is not None and rid == current and turns:
            turns[-1].ids.add(event["id"])
            turns[-1].events.append(event)
        else:
            turns.append(_Turn({event["id"]}, [event]))
        current = rid
    return turns


#: OpenHands' ``workspace_mount_path_in_sandbox`` default: where its sandbox mounts the workspace
DEFAULT_WORKSPACE = "/workspace"


def workspace_of(events: Sequence[JsonObject]) -> tuple[str | None, str | None]:
    """The workspace and, when it was not recorded, why forkpoint derives it: OpenHands' default ``/workspace``
    when every absolute path the agent's calls name lies below it (a recording without recall or command events,
    e.g. OpenHands' own tests/runtime/trajs/basic.json). None when nothing backs a workspace."""
    recorded = recorded_workspace(events)
    if recorded is not None:
        return recorded, None
    paths = [path for event in events if event.get("source") == "agent" and isinstance(event.get("action"), str)
             for path in (as_text(as_object(event.get("args")).get("path")),) if path and path.startswith("/")]
    inside = [os.path.normpath(path).startswith(DEFAULT_WORKSPACE + "/") for path in paths]
    if not inside or not all(inside):
        return None, None
    return DEFAULT_WORKSPACE, (f"no workspace recorded (no recall observation, no command working dir): derived "
                               f"OpenHands' default sandbox workspace {DEFAULT_WORKSPACE}, which every path the "
                               "recorded calls name lies below")


def recorded_workspace(events: Iterable[JsonObject]) -> str | None:
    """The CLI runtime's workspace: the recall observation's ``working_dir``, else a command's working dir."""
    fallback = None
    for event in events:
        extras = as_object(event.get("extras"))
        working_dir = as_text(extras.get("working_dir"))
        if event.get("observation") == "recall" and working_dir:
            return os.path.normpath(working_dir)
        command_dir = as_text(as_object(extras.get("metadata")).get("working_dir"))
        if fallback is None and command_dir:
            fallback = os.path.normpath(command_dir)
    return fallback
