"""Parse a Qwen Code 0.24.4 chat recording into the neutral Trajectory (pure apart from reading the file).

The native file (measured on the real binary, docs/adapters/qwen-code.md) is
``~/.qwen/projects/<sanitised cwd>/chats/<session id>.jsonl``: one record per line, each ``{uuid, parentUuid,
sessionId, timestamp, type, provenance, cwd, version, ...}`` chained by ``parentUuid`` (a resumed session appends
to the same chain). ``type`` is

* ``user``: ``message = {role: user, parts}`` (the prompt as typed; the CLI's ``<system-reminder>`` context is
  not stored);
* ``assistant``: ``message = {role: model, parts}`` with ``text`` / ``thought`` / ``functionCall {id, name, args}``
  parts, the ``model`` and ``usageMetadata``;
* ``tool_result``: ``message = {role: user, parts: [functionResponse {id, name, response}]}`` and
  ``toolCallResult {callId, status, resultDisplay, executionStatus}``, one record per call;
* ``system``: bookkeeping (``ui_telemetry``, ``attribution_snapshot`` ...), never sent to the model.

One replay step is one ``assistant`` record with function calls and the ``tool_result`` records that answer them.
A chain that branches (a record whose parent is not the record before it: a rewind or a fork) is refused: the
rebuild keeps plain linear histories only.
"""

from __future__ import annotations

import hashlib
import os
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

AGENT = "qwen-code"
#: Qwen Code 0.24.4's built-in tools re-run through the real binary (measured: docs/adapters/qwen-code.md)
FRESH_TOOLS = ("read_file", "write_file", "edit", "run_shell_command", "glob", "grep_search")
#: tools whose observation cannot be refreshed from the workspace, with the reason
STALE_TOOLS = {
    "web_fetch": "web_fetch reads the network: its page is not part of the workspace (stale by nature)",
    "web_search": "web_search asks a search service: not reproducible (stale by nature)",
    "save_memory": "save_memory writes the user's ~/.qwen memory, outside the workspace (stale by nature)",
    "todo_write": "todo_write changes the CLI's in-memory todo list only; its answer is reused",
    "get_goal": "get_goal reads the session's goal state only; its answer is reused",
    "update_goal": "update_goal changes the session's goal state only; its answer is reused",
    "list_agents": "list_agents lists sub-agents installed in the recorded user's HOME",
    "skill": "skill reads skills installed in the recorded user's HOME or bundled with the CLI",
    "tool_search": "tool_search lists the CLI's deferred tools; its answer is reused",
    "agent": "agent runs a sub-agent with its own model calls (not re-run)",
}
_DONE = frozenset({"success", "error", "cancelled"})
_TYPES = frozenset({"user", "assistant", "tool_result", "system"})


@dataclass
class QwenNative:
    """What the rebuild needs: every record in order, and where each batch sits."""

    records: list[JsonObject]
    batch_record: list[int] = field(default_factory=list)  # per batch: index of its assistant record
    batch_end: list[int] = field(default_factory=list)  # per complete batch: index of its last tool_result record

    @property
    def session_id(self) -> str:
        return str(self.records[0]["sessionId"])

    @property
    def model(self) -> str | None:
        """The model of the first assistant record (what the continuation asks for)."""
        for record in self.records:
            if record.get("type") == "assistant" and isinstance(record.get("model"), str) and record["model"]:
                return str(record["model"])
        return None


def parse_qwen(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory[QwenNative]:
    source = read_trajectory(path, max_bytes, "Qwen Code session")
    warnings: list[str] = []
    records: list[JsonObject] = []
    for number, _offset, body, terminated in split_line_views(source):
        if is_blank(body):
            continue
        obj = load_jsonl_object(body, number, terminated=terminated, warnings=warnings,
                                invalid="invalid Qwen Code JSONL line {number}",
                                not_object="Qwen Code JSONL line {number} must contain an object")
        if obj is not None:
            _check_record(obj, number, records)
            records.append(obj)
    if not records:
        raise trajectory("the Qwen Code session is empty")
    return _build(path, hashlib.sha256(source).hexdigest(), QwenNative(records), warnings)


def _check_record(obj: JsonObject, number: int, before: list[JsonObject]) -> None:
    if not isinstance(obj.get("uuid"), str) or not obj["uuid"] or obj.get("type") not in _TYPES:
        raise trajectory(f"Qwen Code record at line {number} has no uuid or an unknown type {obj.get('type')!r}",
                         line=number)
    if not before:
        check_id(obj.get("sessionId"), "session id", shape=UUID,
                 shape_name="a UUID (Qwen Code session ids are UUIDs)")
    elif obj.get("sessionId") != before[0]["sessionId"]:
        raise trajectory(f"Qwen Code record at line {number} names another session", line=number)
    parent = before[-1]["uuid"] if before else None
    if obj.get("parentUuid") != parent:
        raise trajectory(f"Qwen Code record at line {number} does not continue the record before it (a branched "
                         "or rewound session); forkpoint rebuilds linear histories only", line=number)
    if obj["type"] != "system":
        message = obj.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("parts"), list):
            raise trajectory(f"Qwen Code {obj['type']} record at line {number} has no message parts", line=number)


def parts(record: JsonObject) -> list[Any]:
    message = record.get("message")
    found = message.get("parts") if isinstance(message, dict) else None
    return found if isinstance(found, list) else []


def function_calls(record: JsonObject, where: str) -> list[JsonObject]:
    calls = [p["functionCall"] for p in parts(record) if isinstance(p, dict) and "functionCall" in p]
    seen: set[str] = set()
    for index, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not call["id"]:
            raise trajectory(f"Qwen Code {where}: function call {index} has no id")
        if not isinstance(call.get("name"), str) or not call["name"]:
            raise trajectory(f"Qwen Code {where}: function call {index} has no name")
        if not isinstance(call.get("args"), dict):
            raise trajectory(f'Qwen Code function call "{call["id"]}" args must be an object')
        if call["id"] in seen:
            raise trajectory(f'Qwen Code {where}: duplicate function call id "{call["id"]}"')
        seen.add(call["id"])
    return calls


def response_of(record: JsonObject) -> JsonObject | None:
    """The ``functionResponse`` a tool_result record carries (its first one)."""
    for part in parts(record):
        if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
            return dict(part["functionResponse"])
    return None


def _build(path: Path, sha256: str, native: QwenNative, warnings: list[str]) -> Trajectory[QwenNative]:
    records = native.records
    batches: list[Batch] = []
    index = 0
    while index < len(records):
        record = records[index]
        calls = function_calls(record, f"record {record['uuid']}") if record["type"] == "assistant" else []
        if not calls:
            index += 1
            continue
        results: dict[str, JsonObject] = {}
        end = index
        cursor = index + 1
        while cursor < len(records) and records[cursor]["type"] in ("tool_result", "system"):
            if records[cursor]["type"] == "tool_result":
                response = response_of(records[cursor])
                if response is not None and response.get("id") in {c["id"] for c in calls}:
                    results[str(response["id"])] = records[cursor]
                    end = cursor
            cursor += 1
        complete = all(c["id"] in results and _status(results[c["id"]]) in _DONE for c in calls)
        ordinal = len(batches) + 1
        if batches and not batches[-1].complete:
            raise trajectory(f"Qwen Code batch {ordinal - 1} is incomplete but the conversation goes on")
        native.batch_record.append(index)
        if complete:
            native.batch_end.append(end)
        batches.append(Batch(ordinal, tuple(_tool_call(c, results.get(c["id"])) for c in calls),
                             f"record:{record['uuid']}", complete=complete))
        index = cursor
    if not any(r["type"] == "user" for r in records):
        raise trajectory("the Qwen Code session has no user prompt")
    version = next((r["version"] for r in records if isinstance(r.get("version"), str)), None)
    return Trajectory.recorded(AGENT, version, path, sha256, session_id=native.session_id, cwd=recorded_cwd(records),
                               batches=batches, next_actions=_next_actions(native), warnings=warnings, native=native)


def recorded_cwd(records: list[JsonObject]) -> str | None:
    """The ``cwd`` every record names, when it is one normalised absolute path (else None: nothing is guessed)."""
    found = {r.get("cwd") for r in records}
    if len(found) != 1:
        return None
    cwd = found.pop()
    if isinstance(cwd, str) and cwd.startswith("/") and "\x00" not in cwd and os.path.normpath(cwd) == cwd:
        return cwd
    return None


def _status(record: JsonObject) -> str | None:
    result = record.get("toolCallResult")
    status = result.get("status") if isinstance(result, dict) else None
    return status if isinstance(status, str) else None


def _tool_call(call: JsonObject, result: JsonObject | None) -> ToolCall:
    name = str(call["name"])
    response = response_of(result) if result is not None else None
    content = response.get("response") if response is not None else None
    historical = None if response is None else Observation(
        content if isinstance(content, dict) else {"output": content},
        result is not None and _status(result) == "error")
    policy, reason = CallPolicy.FRESH, None
    if name in STALE_TOOLS:
        policy, reason = CallPolicy.STALE, STALE_TOOLS[name]
    elif name not in FRESH_TOOLS:
        policy, reason = CallPolicy.REFUSED, (f'"{name}" is not one of Qwen Code 0.24.4\'s built-in tools '
                                              f"({', '.join(FRESH_TOOLS)}); an MCP, deferred or extension tool is "
                                              "not re-run")
    return ToolCall(str(call["id"]), name, dict(call["args"]), historical, policy, reason, native=call)


def text_of(items: list[Any]) -> str:
    return "".join(str(p["text"]) for p in items if isinstance(p, dict) and isinstance(p.get("text"), str)
                   and not p.get("thought"))


def signature(record: JsonObject) -> ActionSignature:
    items = parts(record)
    return ActionSignature(
        text=text_of(items),
        reasoning="\n\n".join(str(p["text"]) for p in items if isinstance(p, dict) and p.get("thought")
                              and isinstance(p.get("text"), str)),
        tools=tuple((str(p["functionCall"].get("name")), dict(p["functionCall"].get("args") or {}))
                    for p in items if isinstance(p, dict) and isinstance(p.get("functionCall"), dict)),
    )


def model_turns(records: list[JsonObject]) -> list[int]:
    return [i for i, r in enumerate(records) if r.get("type") == "assistant"]


def _next_actions(native: QwenNative) -> list[ActionSignature | None]:
    """[0] = the first model turn; [n] = the first model turn after batch n's last record."""
    turns = model_turns(native.records)
    actions: list[ActionSignature | None] = []
    for start in (-1, *native.batch_end):
        after = next((i for i in turns if i > start), None)
        actions.append(signature(native.records[after]) if after is not None else None)
    return actions


def dumps(value: Any) -> bytes:
    """Compact JSON the way Qwen Code writes its session lines (JSON.stringify)."""
    return orjson.dumps(value)
