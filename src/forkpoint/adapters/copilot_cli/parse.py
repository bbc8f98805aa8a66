"""Parse a GitHub Copilot CLI session-state event log into the neutral Trajectory (pure apart from the read).

The native file (measured on the real 1.0.102 binary, docs/adapters/copilot-cli.md) is
``$COPILOT_HOME/session-state/<session-id>/events.jsonl`` (``COPILOT_HOME`` defaults to ``~/.copilot``): one event
per line, ``{type, data, id, timestamp, parentId}``, the first a ``session.start`` (``data.sessionId``,
``data.copilotVersion``, ``data.context.cwd``, ``data.selectedModel``). What the model sees, and what
``copilot --resume`` rebuilds the conversation from:

* ``user.message`` (``data.transformedContent``: the prompt behind a ``<current_datetime>`` line);
* ``assistant.message`` (``data.content``, ``data.toolRequests`` = ``[{toolCallId, name, arguments, type}]``);
* ``tool.execution_complete`` (``data.toolCallId``, ``data.success``; a success's ``data.result.content``, a
  failure's ``data.error.message``: the text a resumed request carries for the call).

One replay step is one top-level ``assistant.message`` with tool requests plus the completions of its calls.
Events of a sub-agent carry ``data.parentToolCallId``; they belong to the ``task`` call that started it, whose
answer is reused (stale). Events that rewrite the conversation (compaction, truncation, a rewind, a cleared
context, a hand-off) are refused: the rebuild reproduces plain histories only.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters.kit.ids import UUID, check_id
from forkpoint.adapters.kit.jsondoc import load_jsonl_object
from forkpoint.adapters.source import read_trajectory
from forkpoint.core.errors import trajectory
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES, is_blank, split_line_views
from forkpoint.core.model import ActionSignature, Batch, CallPolicy, JsonObject, Observation, ToolCall, Trajectory

AGENT = "copilot-cli"
#: Copilot CLI 1.0.102's tools re-run through the real binary (measured: docs/adapters/copilot-cli.md)
FRESH_TOOLS = ("bash", "view", "create", "edit", "grep", "glob")
#: tools whose observation cannot be refreshed from the workspace, with the reason
STALE_TOOLS = {
    "read_bash": "read_bash reads a shell session of the recorded run, which does not exist in the replay",
    "write_bash": "write_bash writes to a shell session of the recorded run, which does not exist in the replay",
    "stop_bash": "stop_bash stops a shell session of the recorded run, which does not exist in the replay",
    "list_bash": "list_bash lists the shell sessions of the recorded run, which do not exist in the replay",
    "task": "task runs a sub-agent with its own model calls (not re-run); its answer is reused",
    "read_agent": "read_agent reads a background sub-agent of the recorded run",
    "list_agents": "list_agents lists the sub-agents of the recorded run",
    "write_agent": "write_agent messages a background sub-agent of the recorded run",
    "sql": "sql queries the recorded session's own database under ~/.copilot, outside the workspace",
    "session_store_sql": "session_store_sql queries the user's session store under ~/.copilot (or GitHub's)",
    "skill": "skill loads a skill installed in the recorded user's HOME",
    "fetch_copilot_cli_documentation": "fetch_copilot_cli_documentation reads the CLI's own documentation",
    "web_fetch": "web_fetch reads the network: its page is not part of the workspace (stale by nature)",
    "report_intent": "report_intent changes the CLI's status line only; its answer is reused",
    "update_todo": "update_todo changes the CLI's in-memory todo list only; its answer is reused",
}
#: events after which the conversation is no longer the plain list of messages the rebuild writes
REWRITING = frozenset({"session.compaction_start", "session.compaction_complete", "session.truncation",
                       "session.snapshot_rewind", "session.context_cleared", "session.handoff"})


@dataclass
class CopilotNative:
    """What the rebuild needs: every event in order, and where each batch sits."""

    events: list[JsonObject]
    start: JsonObject
    batch_message: list[int] = field(default_factory=list)  # per batch: index of its assistant.message
    batch_end: list[int] = field(default_factory=list)  # per complete batch: index of its last completion

    @property
    def session_id(self) -> str:
        return str(self.start["data"]["sessionId"])

    @property
    def version(self) -> str | None:
        value = self.start["data"].get("copilotVersion")
        return value if isinstance(value, str) and value else None

    @property
    def model(self) -> str | None:
        """The model the recording used: the first top-level assistant message's, else the selected one."""
        for event in self.events:
            data = event.get("data")
            if event.get("type") == "assistant.message" and isinstance(data, dict) and _top_level(data):
                model = data.get("model")
                if isinstance(model, str) and model:
                    return model
        selected = self.start["data"].get("selectedModel")
        return selected if isinstance(selected, str) and selected else None


def parse_copilot(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory[CopilotNative]:
    source = read_trajectory(path, max_bytes, "Copilot CLI session")
    warnings: list[str] = []
    events: list[JsonObject] = []
    for number, _offset, body, terminated in split_line_views(source):
        if is_blank(body):
            continue
        obj = load_jsonl_object(body, number, terminated=terminated, warnings=warnings,
                                invalid="invalid Copilot CLI event at line {number}",
                                not_object="Copilot CLI event line {number} must contain an object")
        if obj is None:
            continue
        if not isinstance(obj.get("type"), str) or not isinstance(obj.get("data"), dict):
            raise trajectory(f"Copilot CLI event at line {number} has no type and data object", line=number)
        if obj["type"] in REWRITING:
            raise trajectory(f"Copilot CLI event {obj['type']!r} at line {number} rewrites the conversation; "
                             "forkpoint rebuilds plain event histories only", line=number)
        events.append(obj)
    if not events:
        raise trajectory("the Copilot CLI session is empty")
    start = events[0]
    if start["type"] != "session.start":
        raise trajectory("the first event of a Copilot CLI session must be session.start")
    check_id(start["data"].get("sessionId"), "session id", shape=UUID,
             shape_name="a UUID (Copilot CLI session ids are UUIDs)")
    for event in events[1:]:
        if event["type"] == "session.start" and event["data"].get("sessionId") != start["data"]["sessionId"]:
            raise trajectory("a Copilot CLI session.start event names another session")
    native = CopilotNative(events, start)
    return _build(path, hashlib.sha256(source).hexdigest(), native, warnings)


def _top_level(data: JsonObject) -> bool:
    """Not an event of a sub-agent (those carry the ``task`` call that started them)."""
    return data.get("parentToolCallId") in (None, "")


def tool_requests(data: JsonObject, where: str) -> list[JsonObject]:
    requests = data.get("toolRequests") or []
    if not isinstance(requests, list):
        raise trajectory(f"Copilot CLI {where}: toolRequests must be a list")
    seen: set[str] = set()
    for index, request in enumerate(requests):
        if not isinstance(request, dict) or not isinstance(request.get("toolCallId"), str) or not request["toolCallId"]:
            raise trajectory(f"Copilot CLI {where}: toolRequests[{index}] has no toolCallId")
        if not isinstance(request.get("name"), str) or not request["name"]:
            raise trajectory(f"Copilot CLI {where}: toolRequests[{index}] has no name")
        if not isinstance(request.get("arguments"), dict):
            raise trajectory(f'Copilot CLI tool call "{request["toolCallId"]}" arguments must be an object')
        if request["toolCallId"] in seen:
            raise trajectory(f'Copilot CLI {where}: duplicate tool call id "{request["toolCallId"]}"')
        seen.add(request["toolCallId"])
    return requests


def observation_of(data: JsonObject) -> Observation | None:
    """What a resumed request carries for a completed call: a success's ``result.content``, a failure's
    ``error.message`` (measured: the resumed request sends exactly these)."""
    if data.get("success") is True:
        result = data.get("result")
        content = result.get("content") if isinstance(result, dict) else None
        return Observation(content if isinstance(content, str) else "", False)
    if data.get("success") is False:
        error = data.get("error")
        message = error.get("message") if isinstance(error, dict) else error
        return Observation(message if isinstance(message, str) else "", True)
    return None


def _build(path: Path, sha256: str, native: CopilotNative, warnings: list[str]) -> Trajectory[CopilotNative]:
    events = native.events
    completions: dict[str, tuple[int, JsonObject]] = {}
    for index, event in enumerate(events):
        if event["type"] == "tool.execution_complete":
            call_id = event["data"].get("toolCallId")
            if isinstance(call_id, str) and call_id not in completions:
                completions[call_id] = (index, event["data"])
    batches: list[Batch] = []
    seen_ids: set[str] = set()
    for index, event in enumerate(events):
        data = event["data"]
        if event["type"] != "assistant.message" or not _top_level(data):
            continue
        requests = tool_requests(data, f"event {event.get('id')}")
        if not requests:
            continue
        ids = [str(r["toolCallId"]) for r in requests]
        if seen_ids & set(ids):
            raise trajectory(f"Copilot CLI tool call id {sorted(seen_ids & set(ids))[0]!r} is used twice")
        seen_ids.update(ids)
        done = [completions.get(call_id) for call_id in ids]
        complete = all(d is not None and d[0] > index and observation_of(d[1]) is not None for d in done)
        ordinal = len(batches) + 1
        if batches and not batches[-1].complete:
            raise trajectory(f"Copilot CLI batch {ordinal - 1} is incomplete but the conversation goes on")
        native.batch_message.append(index)
        if complete:
            native.batch_end.append(max(d[0] for d in done if d is not None))
        calls = tuple(_tool_call(request, None if found is None else found[1])
                      for request, found in zip(requests, done, strict=True))
        batches.append(Batch(ordinal, calls, f"event:{event.get('id')}", complete=complete))
    if not any(e["type"] == "user.message" for e in events):
        raise trajectory("the Copilot CLI session has no user prompt")
    context = native.start["data"].get("context")
    cwd = context.get("cwd") if isinstance(context, dict) else None
    return Trajectory.recorded(AGENT, native.version, path, sha256, session_id=native.session_id,
                               cwd=cwd if isinstance(cwd, str) and cwd.startswith("/") else None,
                               batches=batches, next_actions=_next_actions(native), warnings=warnings, native=native)


def _tool_call(request: JsonObject, completion: JsonObject | None) -> ToolCall:
    name = str(request["name"])
    arguments = dict(request["arguments"])
    historical = None if completion is None else observation_of(completion)
    policy, reason = CallPolicy.FRESH, None
    if name in STALE_TOOLS:
        policy, reason = CallPolicy.STALE, STALE_TOOLS[name]
    elif name not in FRESH_TOOLS:
        policy, reason = CallPolicy.REFUSED, (f'"{name}" is not one of Copilot CLI 1.0.102\'s built-in tools '
                                              f"({', '.join(FRESH_TOOLS)}); an MCP or extension tool is not re-run")
    elif name == "bash" and (arguments.get("mode") == "async" or arguments.get("detach") is True):
        policy, reason = CallPolicy.STALE, ("a background (async) bash call leaves a shell running for later "
                                            "read_bash calls; its first answer is reused")
    return ToolCall(str(request["toolCallId"]), name, arguments, historical, policy, reason, native=request)


def signature(data: JsonObject) -> ActionSignature:
    reasoning = data.get("reasoningText")
    return ActionSignature(
        text=str(data.get("content") or ""),
        reasoning=reasoning if isinstance(reasoning, str) else "",
        tools=tuple((str(r.get("name")), dict(r.get("arguments") or {})) for r in data.get("toolRequests") or []
                    if isinstance(r, dict)),
    )


def model_turns(events: list[JsonObject]) -> list[int]:
    return [i for i, e in enumerate(events) if e["type"] == "assistant.message" and _top_level(e["data"])]


def _next_actions(native: CopilotNative) -> list[ActionSignature | None]:
    """[0] = the first model turn; [n] = the first model turn after batch n's last completion."""
    turns = model_turns(native.events)
    actions: list[ActionSignature | None] = []
    for start in (-1, *native.batch_end):
        after = next((i for i in turns if i > start), None)
        actions.append(signature(native.events[after]["data"]) if after is not None else None)
    return actions


def dumps(value: Any) -> bytes:
    """Compact JSON the way Copilot CLI writes its event lines (JSON.stringify)."""
    return orjson.dumps(value)
