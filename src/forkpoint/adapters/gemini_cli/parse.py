"""Parse a Gemini CLI 0.61.0 chat recording into the neutral Trajectory (pure apart from reading the file).

The native file (measured on the real binary, docs/adapters/gemini-cli.md) is
``~/.gemini/tmp/<project>/chats/session-<time>-<id8>.jsonl``: a header line (``sessionId``, ``projectHash``,
``startTime``, ``lastUpdated``, ``kind``), then records:

* a message record ``{id, timestamp, type: user|gemini|info|error|warning, content, ...}``; a record whose ``id``
  was seen before REPLACES that message in place (a ``gemini`` message is written once when the answer ends and
  again with its ``toolCalls`` once they ran);
* ``{"$set": {...}}``: metadata updates; ``$set.messages`` replaces the whole message list (the first record sets
  the environment ``<session_context>`` message that way).

Any other ``$``-record (a rewind) changes the conversation in ways the rebuild does not reproduce: refused.

One replay step is one ``gemini`` message with ``toolCalls`` (each ``{id, name, args, result, status}``, ``result``
a list of ``functionResponse`` parts) and the ``user`` record after it that carries the same function responses.
The session names no CLI version: recordings are read with the verified 0.61.0 profile (a warning says so).
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

AGENT = "gemini-cli"
#: Gemini CLI 0.61.0's tools re-run through the real binary (measured: docs/adapters/gemini-cli.md)
FRESH_TOOLS = ("read_file", "write_file", "replace", "run_shell_command", "glob", "grep_search", "list_directory")
#: tools whose observation cannot be refreshed from the workspace, with the reason
STALE_TOOLS = {
    "web_fetch": "web_fetch reads the network: its page is not part of the workspace (stale by nature)",
    "google_web_search": "google_web_search asks Google's search service: not reproducible (stale by nature)",
    "save_memory": "save_memory writes the user's ~/.gemini/GEMINI.md, outside the workspace (stale by nature)",
    "write_todos": "write_todos changes the CLI's in-memory todo list only; its answer is reused",
    "update_topic": "update_topic changes the CLI's session title only; its answer is reused",
    "enter_plan_mode": "enter_plan_mode switches the CLI's approval mode; its answer is reused",
    "list_background_processes": "background processes of the recorded session do not exist in the replay",
    "read_background_output": "background processes of the recorded session do not exist in the replay",
    "activate_skill": "activate_skill reads skills installed in the recorded user's HOME",
    "invoke_agent": "invoke_agent runs a sub-agent with its own model calls (not re-run)",
}
#: tools of older releases that 0.61.0 no longer offers (its binary cannot re-run them)
RENAMED = {"search_file_content": "grep_search", "read_many_files": None}
_DONE = frozenset({"success", "error", "cancelled"})
_MESSAGE_TYPES = frozenset({"user", "gemini", "info", "error", "warning"})


@dataclass
class GeminiNative:
    """What the rebuild needs: the header, the final messages in order, and where each batch sits."""

    header: JsonObject
    messages: list[JsonObject]
    batch_message: list[int] = field(default_factory=list)  # per batch: index of its gemini message
    batch_end: list[int] = field(default_factory=list)  # per complete batch: index of its last message

    @property
    def model(self) -> str | None:
        """The model of the first gemini message (what the continuation asks for)."""
        for message in self.messages:
            if message.get("type") == "gemini" and isinstance(message.get("model"), str) and message["model"]:
                return str(message["model"])
        return None


def parse_gemini(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory[GeminiNative]:
    source = read_trajectory(path, max_bytes, "Gemini CLI session")
    warnings: list[str] = []
    objects: list[tuple[int, JsonObject]] = []
    for number, _offset, body, terminated in split_line_views(source):
        if is_blank(body):
            continue
        obj = load_jsonl_object(body, number, terminated=terminated, warnings=warnings,
                                invalid="invalid Gemini CLI JSONL line {number}",
                                not_object="Gemini CLI JSONL line {number} must contain an object")
        if obj is not None:
            objects.append((number, obj))
    if not objects:
        raise trajectory("the Gemini CLI session is empty")
    header = objects[0][1]
    if not all(isinstance(header.get(key), str) for key in ("sessionId", "projectHash", "startTime")):
        raise trajectory("the first line of a Gemini CLI session must be its header (sessionId, projectHash, "
                         "startTime)", line=objects[0][0])
    check_id(header["sessionId"], "session id", shape=UUID, shape_name="a UUID (Gemini CLI session ids are UUIDs)")
    rest = []
    for number, obj in objects[1:]:  # a resumed session appends its header again
        if "sessionId" in obj and "projectHash" in obj:
            if obj.get("sessionId") != header["sessionId"]:
                raise trajectory(f"Gemini CLI header at line {number} names another session", line=number)
            continue
        rest.append((number, obj))
    native = GeminiNative(header, _messages(rest))
    return _build(path, hashlib.sha256(source).hexdigest(), native, warnings)


def _messages(objects: list[tuple[int, JsonObject]]) -> list[JsonObject]:
    order: list[str] = []
    by_id: dict[str, JsonObject] = {}
    for number, obj in objects:
        if "$set" in obj:
            update = obj["$set"]
            if not isinstance(update, dict):
                raise trajectory(f"Gemini CLI $set record at line {number} is not an object", line=number)
            if "messages" in update:
                messages = update["messages"]
                if not isinstance(messages, list):
                    raise trajectory(f"Gemini CLI $set.messages at line {number} is not a list", line=number)
                order, by_id = [], {}
                for position, message in enumerate(messages):  # a list: the CLI repeats ids in it (measured)
                    _put(message, number, order, by_id, key=f"{position}#set")
            continue
        special = [key for key in obj if key.startswith("$")]
        if special:
            raise trajectory(f"Gemini CLI record {special[0]!r} at line {number} changes the conversation (a rewind); "
                             "forkpoint rebuilds plain message histories only", line=number)
        _put(obj, number, order, by_id)
    return [by_id[key] for key in order]


def _put(message: Any, number: int, order: list[str], by_id: dict[str, JsonObject], key: str | None = None) -> None:
    """Append a message, or replace the last one with its id (``key``: a list position, never replaced)."""
    if not isinstance(message, dict) or not isinstance(message.get("id"), str) or not message["id"]:
        raise trajectory(f"Gemini CLI message at line {number} has no id", line=number)
    if message.get("type") not in _MESSAGE_TYPES:
        raise trajectory(f"Gemini CLI message at line {number} has type {message.get('type')!r}", line=number)
    if key is None:
        found = next((k for k in reversed(order) if by_id[k].get("id") == message["id"]), None)
        key = found or message["id"]
    if key not in by_id:
        order.append(key)
    by_id[key] = message


def tool_calls(message: JsonObject, where: str) -> list[JsonObject]:
    calls = message.get("toolCalls") or []
    if not isinstance(calls, list):
        raise trajectory(f"Gemini CLI {where}: toolCalls must be a list")
    seen: set[str] = set()
    for index, call in enumerate(calls):
        if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not call["id"]:
            raise trajectory(f"Gemini CLI {where}: toolCalls[{index}] has no id")
        if not isinstance(call.get("name"), str) or not call["name"]:
            raise trajectory(f"Gemini CLI {where}: toolCalls[{index}] has no name")
        if not isinstance(call.get("args"), dict):
            raise trajectory(f'Gemini CLI tool call "{call["id"]}" args must be an object')
        if call["id"] in seen:
            raise trajectory(f'Gemini CLI {where}: duplicate tool call id "{call["id"]}"')
        seen.add(call["id"])
    return calls


def response_of(call: JsonObject) -> JsonObject | None:
    """The ``functionResponse.response`` the model saw for a call (its first result part), None without one."""
    result = call.get("result")
    if isinstance(result, str):
        return {"output": result}
    parts = result if isinstance(result, list) else [result] if isinstance(result, dict) else []
    for part in parts:
        if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
            response = part["functionResponse"].get("response")
            return response if isinstance(response, dict) else {"output": response}
    return None


def response_ids(message: JsonObject) -> set[str]:
    """The ids of the function responses a user record carries."""
    content = message.get("content")
    parts = content if isinstance(content, list) else []
    return {str(p["functionResponse"].get("id")) for p in parts
            if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)}


def _build(path: Path, sha256: str, native: GeminiNative, warnings: list[str]) -> Trajectory[GeminiNative]:
    messages = native.messages
    batches: list[Batch] = []
    for index, message in enumerate(messages):
        if message.get("type") != "gemini":
            continue
        calls = tool_calls(message, f"message {message['id']}")
        if not calls:
            continue
        complete = all(call.get("status") in _DONE and response_of(call) is not None for call in calls)
        ids = {call["id"] for call in calls}
        end = index
        following = messages[index + 1] if index + 1 < len(messages) else None
        if following is not None and following.get("type") == "user" and response_ids(following) & ids:
            end = index + 1
        ordinal = len(batches) + 1
        if batches and not batches[-1].complete:
            raise trajectory(f"Gemini CLI batch {ordinal - 1} is incomplete but the conversation goes on")
        native.batch_message.append(index)
        if complete:
            native.batch_end.append(end)
        batches.append(Batch(ordinal, tuple(_tool_call(call) for call in calls), f"message:{message['id']}",
                             complete=complete))
    if not any(m.get("type") == "user" and not _is_context(m) for m in messages):
        raise trajectory("the Gemini CLI session has no user prompt")
    warnings.append("Gemini CLI sessions do not name the CLI version; they are read with the verified 0.61.0 profile")
    cwd = project_root(native.header, messages)
    return Trajectory.recorded(AGENT, None, path, sha256, session_id=str(native.header["sessionId"]), cwd=cwd,
                               batches=batches, next_actions=_next_actions(native), warnings=warnings, native=native)


def project_root(header: JsonObject, messages: list[JsonObject]) -> str | None:
    """The directory the session was recorded in: the ``<session_context>`` lists the workspace directories, and
    the header's ``projectHash`` is the SHA-256 of the project root (measured on 0.61.0), so the listed directory
    with that hash is it. None when no listed directory matches (nothing is guessed: a hostile context text cannot
    choose where ``--sandbox bwrap`` mounts the workspace without also matching the hash)."""
    wanted = header.get("projectHash")
    context = next((m for m in messages if m.get("type") == "user" and _is_context(m)), None)
    if not isinstance(wanted, str) or context is None:
        return None
    content = context.get("content")
    first = content[0] if isinstance(content, list) and content else content
    text = first.get("text") if isinstance(first, dict) else first
    for line in str(text).splitlines():
        candidate = line.strip().removeprefix("- ").strip()
        if (candidate.startswith("/") and "\x00" not in candidate and os.path.normpath(candidate) == candidate
                and hashlib.sha256(candidate.encode()).hexdigest() == wanted):
            return candidate
    return None


def _is_context(message: JsonObject) -> bool:
    content = message.get("content")
    first = content[0] if isinstance(content, list) and content else content
    text = first.get("text") if isinstance(first, dict) else first
    return isinstance(text, str) and text.strip().startswith("<session_context>")


def _tool_call(call: JsonObject) -> ToolCall:
    name = str(call["name"])
    response = response_of(call)
    historical = None if response is None else Observation(response, call.get("status") == "error")
    policy, reason = CallPolicy.FRESH, None
    if name in STALE_TOOLS:
        policy, reason = CallPolicy.STALE, STALE_TOOLS[name]
    elif name in RENAMED:
        policy, reason = CallPolicy.REFUSED, (f'"{name}" is a tool of an older Gemini CLI; the verified 0.61.0 '
                                              "binary cannot re-run it")
    elif name not in FRESH_TOOLS:
        policy, reason = CallPolicy.REFUSED, (f'"{name}" is not one of Gemini CLI 0.61.0\'s built-in tools '
                                              f"({', '.join(FRESH_TOOLS)}); an MCP or extension tool is not re-run")
    return ToolCall(str(call["id"]), name, dict(call["args"]), historical, policy, reason, native=call)


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return "".join(str(p.get("text")) for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def signature(message: JsonObject) -> ActionSignature:
    listed = message.get("thoughts")
    thoughts = listed if isinstance(listed, list) else []
    return ActionSignature(
        text=text_of(message.get("content")),
        reasoning="\n\n".join(str(t.get("description", "")) for t in thoughts if isinstance(t, dict)),
        tools=tuple((str(c.get("name")), dict(c.get("args") or {})) for c in message.get("toolCalls") or []
                    if isinstance(c, dict)),
    )


def model_turns(messages: list[JsonObject]) -> list[int]:
    return [i for i, m in enumerate(messages) if m.get("type") == "gemini"]


def _next_actions(native: GeminiNative) -> list[ActionSignature | None]:
    """[0] = the first model turn; [n] = the first model turn after batch n's last message."""
    turns = model_turns(native.messages)
    actions: list[ActionSignature | None] = []
    for start in (-1, *native.batch_end):
        after = next((i for i in turns if i > start), None)
        actions.append(signature(native.messages[after]) if after is not None else None)
    return actions


def dumps(value: Any) -> bytes:
    """Compact JSON the way Gemini CLI writes its session lines (JSON.stringify)."""
    return orjson.dumps(value)
