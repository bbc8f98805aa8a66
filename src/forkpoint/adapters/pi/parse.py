"""Parse a Pi recording (0.83.0, or 1.x with its ``system`` messages) into the neutral Trajectory (pure apart from
reading the file).

Two native inputs (measured on the real package, see docs/adapters/pi.md):

* the JSON-mode / RPC event stream (``pi --mode json|rpc`` stdout): an optional ``session`` header line, then
  ``agent_start``, ``turn_start``, ``message_start/update/end``, ``tool_execution_*``, ``turn_end``, ``agent_end``,
  ``agent_settled`` (RPC adds ``response`` lines). The conversation is the user ``message_end`` events and, per
  ``turn_end``, its assistant ``message`` followed by its ``toolResults`` (call order, as Pi stores them).
* a v3 session file: a ``session`` header, then entries chained by ``id`` / ``parentId``; the context is the path
  from the last entry to the root, and its ``message`` entries are the conversation.

One replay step is one assistant message with tool calls plus all its results, paired by ``toolCallId``. Pi's
built-in tools (read, bash, edit, write and the optional grep, find, ls) are re-run with Pi's own implementations;
a call Pi answered with its agent loop's "Tool <name> not found" is reproduced as that answer. Pi writes its
enabled tool set nowhere (not in the session, not in the event stream), so it is read from the recording itself
(``enabled_tools``): the defaults, plus each optional built-in Pi ran, minus each built-in Pi rejected. A tool Pi
ran that is not a built-in (an extension or SDK tool) stays REFUSED, so tool semantics never change silently.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters.kit.ids import UUID, check_id
from forkpoint.adapters.kit.jsondoc import load_jsonl_object
from forkpoint.adapters.pi.spec import FAMILY_PLAIN, FAMILY_SYSTEM
from forkpoint.adapters.source import read_trajectory
from forkpoint.core.errors import trajectory
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES, is_blank, split_line_views
from forkpoint.core.model import ActionSignature, Batch, CallPolicy, JsonObject, Observation, ToolCall, Trajectory

AGENT = "pi"
#: Pi 0.83.0's built-in tools in its registry order (createAllToolDefinitions); the first four are on by default
PI_TOOLS = ("read", "bash", "edit", "write", "grep", "find", "ls")
DEFAULT_TOOLS = PI_TOOLS[:4]
#: session entry types that change what the model sees in ways the rebuild does not reproduce
_CONTEXT_ENTRIES = frozenset({"branch_summary", "custom_message", "context_edit"})
_SKIPPED_STOPS = frozenset({"error", "aborted"})  # Pi never sends these assistant messages to the model


@dataclass(frozen=True)
class Compaction:
    """A compaction on the path: from it on, Pi's context is its summary, the messages from ``kept`` on (those
    before it that it keeps) and what follows (session-manager.js buildContextEntries, 1.6.0)."""

    position: int  # how many conversation messages precede it
    where: str  # "line N" (session file) / "event line N" (event stream)
    entry: JsonObject | None  # the session entry as recorded; None in an event stream (no entry ids to keep)
    kept: int  # index of the first message it keeps (== position: none)


@dataclass
class PiNative:
    """What the rebuild needs: the conversation in context order and where each batch sits in it."""

    source_format: str  # "events" | "session"
    header: JsonObject | None
    settings: list[JsonObject]  # model_change / thinking_level_change entries before the first message
    messages: list[JsonObject]
    entry_ids: list[str | None]  # the session entry id of each message (session input), else None
    entry_times: list[str | None] = field(default_factory=list)  # the entry timestamps (session input)
    batch_assistant: list[int] = field(default_factory=list)  # per batch: index of its assistant message
    batch_end: list[int] = field(default_factory=list)  # per complete batch: index of its last toolResult
    tools: tuple[str, ...] = DEFAULT_TOOLS  # the enabled tool set, as the recording shows it (enabled_tools)
    tools_recorded: bool = False  # the set comes from the session's own ``system`` loadout (Pi 0.86.0 on)
    compactions: list[Compaction] = field(default_factory=list)  # on the path, in order

    @property
    def family(self) -> str:
        """Pi 0.86.0 on writes its prompt sections and tool loadout as ``system`` messages (FAMILY_SYSTEM)."""
        return FAMILY_SYSTEM if any(m.get("role") == "system" for m in self.messages) else FAMILY_PLAIN

    def model_info(self) -> tuple[str | None, str | None, str | None]:
        """(provider, model id, api) of the first assistant message: what the continuation must configure."""
        for message in self.messages:
            if message.get("role") == "assistant":
                return _str(message.get("provider")), _str(message.get("model")), _str(message.get("api"))
        return None, None, None


def parse_pi(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory[PiNative]:
    """Parse an event JSONL or a v3 session file (told apart by their lines, not by the file name)."""
    source = read_trajectory(path, max_bytes, "Pi recording")
    objects: list[tuple[int, JsonObject]] = []
    warnings: list[str] = []
    for number, _offset, body, terminated in split_line_views(source):
        obj = _parse_line(body, terminated, number, warnings)
        if obj is not None:
            objects.append((number, obj))
    sha256 = hashlib.sha256(source).hexdigest()
    if not objects:
        raise trajectory("the Pi recording is empty")
    header = objects[0][1] if objects[0][1].get("type") == "session" else None
    if header is not None and header.get("version") != 3:
        raise trajectory(f"Pi session header version {header.get('version')!r} is not 3 (the verified format)")
    if header is not None:
        _check_header_ids(header)
    is_session = header is not None and any(isinstance(o.get("parentId"), str) or "parentId" in o
                                            for _, o in objects[1:])
    native = _from_session(objects, warnings) if is_session else _from_events(objects, warnings)
    native.header = header
    return _build(path, sha256, native, warnings)


def _check_header_ids(header: JsonObject) -> None:
    """The session file is named ``<timestamp with : and . as ->_<id>.jsonl`` (prefix and agent HOME)."""
    if _str(header.get("id")) is not None:  # otherwise an id derived from the recording's hash is used
        check_id(header["id"], "session header id", shape=UUID, shape_name="a UUID (Pi session ids are UUIDs)")
    stamp = header.get("timestamp")
    if isinstance(stamp, str):
        check_id(stamp.replace(":", "-").replace(".", "-"), "session header timestamp")


def _parse_line(body: memoryview, terminated: bool, number: int, warnings: list[str]) -> JsonObject | None:
    if is_blank(body):
        return None
    not_object = "Pi JSONL line {number} must contain an object with a type"
    obj = load_jsonl_object(body, number, terminated=terminated, warnings=warnings,
                            invalid="invalid Pi JSONL line {number}", not_object=not_object)
    if obj is not None and not isinstance(obj.get("type"), str):
        raise trajectory(not_object.format(number=number), line=number)
    return obj


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


# -- event stream ------------------------------------------------------------------------------------------------


def _from_events(objects: list[tuple[int, JsonObject]], warnings: list[str]) -> PiNative:
    messages: list[JsonObject] = []
    turn_lines = [number for number, obj in objects if obj["type"] == "turn_end"]
    pending: JsonObject | None = None  # an assistant message_end not (yet) closed by its turn_end
    compactions: list[Compaction] = []
    for number, obj in objects:
        kind = obj["type"]
        if kind == "message_end":
            message = obj.get("message")
            if not isinstance(message, dict):
                raise trajectory(f"Pi message_end at line {number} has no message", line=number)
            if message.get("role") in ("user", "system"):
                messages.append(message)
            elif message.get("role") == "assistant":
                pending = message
        elif kind == "turn_end":
            messages.extend(_turn_messages(obj, number, last=number == turn_lines[-1]))
            pending = None
        elif kind == "compaction_end" and isinstance(obj.get("result"), dict):
            compactions.append(Compaction(len(messages), f"event line {number}", None, len(messages)))
    if pending is not None:
        warnings.append("the recording ends inside a turn (an assistant message without its turn_end)")
        messages.append(pending)
    if not any(m.get("role") == "user" for m in messages):
        raise trajectory("Pi event trajectory has no native user message")
    native = PiNative("events", None, [], messages, [None] * len(messages))
    native.compactions = compactions
    return native


def _turn_messages(event: JsonObject, number: int, *, last: bool) -> list[JsonObject]:
    """The assistant message of a turn_end and its results (all of them, or none when the final turn is cut)."""
    message = event.get("message")
    if not isinstance(message, dict):
        raise trajectory(f"Pi turn_end at line {number} has no message", line=number)
    if message.get("role") != "assistant":
        raise trajectory(f"Pi turn_end at line {number}: its message is not an assistant message", line=number)
    calls = _tool_calls(message, f"turn_end at line {number}", number)
    results = event.get("toolResults")
    if not isinstance(results, list) or not all(isinstance(r, dict) for r in results):
        raise trajectory(f"Pi turn_end at line {number} has no toolResults array", line=number)
    if len(results) != len(calls):
        if last:
            return [message, *results]  # an incomplete final batch: kept, never selectable
        raise trajectory(f"Pi turn_end at line {number} has {len(calls)} tool calls but {len(results)} results",
                         line=number)
    return [message, *results]


# -- v3 session file -------------------------------------------------------------------------------------------


def _from_session(objects: list[tuple[int, JsonObject]], warnings: list[str]) -> PiNative:
    entries: dict[str, tuple[int, JsonObject]] = {}
    last_id: str | None = None
    for number, obj in objects[1:]:
        entry_id = obj.get("id")
        if not isinstance(entry_id, str) or not entry_id:
            raise trajectory(f"Pi session entry at line {number} has no id", line=number)
        if entry_id in entries:
            raise trajectory(f"Pi session entry id {entry_id!r} at line {number} is duplicated", line=number)
        entries[entry_id] = (number, obj)
        last_id = entry_id
    path: list[tuple[int, JsonObject]] = []
    seen: set[str] = set()
    cursor = last_id
    while cursor is not None:
        if cursor in seen:
            raise trajectory(f"Pi session entries form a parentId cycle at {cursor!r}")
        seen.add(cursor)
        found = entries.get(cursor)
        if found is None:
            raise trajectory(f"Pi session entry parentId {cursor!r} names no entry")
        path.append(found)
        parent = found[1].get("parentId")
        cursor = parent if isinstance(parent, str) else None
    path.reverse()
    if len(path) != len(entries):
        warnings.append(f"{len(entries) - len(path)} session entries are off the active branch and were ignored")
    settings: list[JsonObject] = []
    messages: list[JsonObject] = []
    ids: list[str | None] = []
    times: list[str | None] = []
    compactions: list[Compaction] = []
    before: dict[str, int] = {}  # entry id -> how many messages precede it
    for number, obj in path:
        kind = obj["type"]
        before[obj["id"]] = len(messages)
        if kind == "message":
            message = obj.get("message")
            if not isinstance(message, dict) or not isinstance(message.get("role"), str):
                raise trajectory(f"Pi session message entry at line {number} has no message role", line=number)
            messages.append(message)
            ids.append(obj["id"])
            times.append(_str(obj.get("timestamp")))
        elif kind == "compaction":
            kept = before.get(str(obj.get("firstKeptEntryId")), len(messages))  # not on the path: nothing kept
            compactions.append(Compaction(len(messages), f"line {number}", obj, kept))
        elif kind in _CONTEXT_ENTRIES:
            raise trajectory(f"Pi session entry {kind!r} at line {number} changes the model context; forkpoint "
                             "rebuilds plain message histories only", line=number)
        elif kind in ("model_change", "thinking_level_change") and not messages:
            settings.append(obj)
    if not any(m.get("role") == "user" for m in messages):
        raise trajectory("Pi session has no user message")
    native = PiNative("session", None, settings, messages, ids, times)
    native.compactions = compactions
    return native


# -- shared ----------------------------------------------------------------------------------------------------


def _tool_calls(message: JsonObject, where: str, line: int | None = None) -> list[JsonObject]:
    content = message.get("content")
    if not isinstance(content, list):
        raise trajectory(f"Pi {where}: assistant content must be an array", line=line)
    calls = [block for block in content if isinstance(block, dict) and block.get("type") == "toolCall"]
    ids: set[str] = set()
    for index, call in enumerate(calls):
        call_id, name = call.get("id"), call.get("name")
        if not isinstance(call_id, str) or not call_id:
            raise trajectory(f"Pi {where}: toolCall[{index}] has no id", line=line)
        if not isinstance(name, str) or not name:
            raise trajectory(f"Pi {where}: toolCall[{index}] has no name", line=line)
        if call_id in ids:
            raise trajectory(f'Pi {where}: duplicate tool call id "{call_id}"', line=line)
        if not isinstance(call.get("arguments"), dict):
            raise trajectory(f'Pi tool call "{call_id}" arguments must be an object', line=line)
        ids.add(call_id)
    return calls


def _build(path: Path, sha256: str, native: PiNative, warnings: list[str]) -> Trajectory[PiNative]:
    messages = native.messages
    batches: list[Batch] = []
    found: list[tuple[int, list[tuple[JsonObject, JsonObject | None]], bool]] = []
    index = 0
    while index < len(messages):
        message = messages[index]
        if message.get("role") != "assistant":
            index += 1
            continue
        where = f"assistant message {index}"
        calls = _tool_calls(message, where)
        results: list[JsonObject] = []
        cursor = index + 1
        while cursor < len(messages) and messages[cursor].get("role") == "toolResult":
            results.append(messages[cursor])
            cursor += 1
        if not calls:
            if results:
                raise trajectory(f"Pi {where} has no tool calls but is followed by tool results")
            index = cursor
            continue
        by_id: dict[str, JsonObject] = {}
        for result in results:
            call_id = result.get("toolCallId")
            if not isinstance(call_id, str) or not call_id:
                raise trajectory(f"Pi {where} has a result without toolCallId")
            if call_id in by_id:
                raise trajectory(f'Pi {where} has a duplicate result id "{call_id}"')
            by_id[call_id] = result
        unknown = [cid for cid in by_id if cid not in {c["id"] for c in calls}]
        if unknown:
            raise trajectory(f'Pi {where} has a result for unknown tool call "{unknown[0]}"')
        complete = len(by_id) == len(calls)
        if not complete and cursor < len(messages):
            missing = next(c["id"] for c in calls if c["id"] not in by_id)
            raise trajectory(f'Pi {where} has no result for tool call "{missing}"')
        found.append((index, [(call, by_id.get(call["id"])) for call in calls], complete))
        native.batch_assistant.append(index)
        if complete:
            native.batch_end.append(cursor - 1)
        index = cursor
    pairs = [pair for _, batch_pairs, _ in found for pair in batch_pairs]
    native.tools, conflicts = enabled_tools(pairs)
    loadout = recorded_tools(messages)
    if loadout is not None:
        native.tools, native.tools_recorded = loadout, True
    for ordinal, (at, batch_pairs, complete) in enumerate(found, start=1):
        compacted = next((c.where for c in native.compactions if c.position <= at and c.entry is None), None)
        tool_calls = tuple(_compacted(_tool_call(call, result, conflicts), compacted) for call, result in batch_pairs)
        batches.append(Batch(ordinal, tool_calls, f"message:{at}", complete=complete))
    if native.compactions:
        where = ", ".join(c.where for c in native.compactions)
        warnings.append(f"Pi compacted the context ({where}): " + (
            "a boundary after a compaction is rebuilt with it (Pi's context is then its summary and the messages "
            "it keeps), and holds only while the observations it summarised replay exactly"
            if native.source_format == "session" else
            "an event stream does not hold the compaction entries, so the batches after the first are refused; "
            "the session file keeps them"))
    if native.tools != DEFAULT_TOOLS and not native.tools_recorded:
        warnings.append(f"Pi does not record its enabled tools; the recording shows {','.join(native.tools)} "
                        "(the optional built-ins it ran, without the built-ins it rejected): replay and "
                        "continuation use that set")
    next_actions = _next_actions(native)
    header = native.header or {}
    session_id = _str(header.get("id")) or str(uuid.UUID(sha256[:32]))
    if native.source_format == "events" and native.header is None:
        warnings.append("the event stream has no session header; the rebuilt session gets an id derived from "
                        "the recording's hash")
    warnings.append("Pi recordings do not name the Pi version; they are read with the verified profile of their "
                    "format (0.83.0 without system messages, 1.6.0 with them)")
    return Trajectory.recorded(AGENT, None, path, sha256, session_id=session_id, cwd=_str(header.get("cwd")),
                               batches=batches, next_actions=next_actions, warnings=warnings, native=native)


def not_found_text(name: str) -> str:
    """What Pi 0.83.0's agent loop answers a call to a tool outside its enabled set (agent-loop.js)."""
    return f"Tool {name} not found"


def is_not_found(name: str, result: JsonObject | None) -> bool:
    """Whether Pi answered this call with its loop's own "not found" error (no tool ran)."""
    return result is not None and bool(result.get("isError")) and result.get("content") == [
        {"type": "text", "text": not_found_text(name)}]


def enabled_tools(pairs: list[tuple[JsonObject, JsonObject | None]]) -> tuple[tuple[str, ...], frozenset[str]]:
    """The enabled built-ins the recording shows, in Pi's registry order, and the names it shows both ways.

    Pi enables read, bash, edit, write unless ``--tools`` / ``--no-tools`` / ``--exclude-tools`` say otherwise and
    writes the choice nowhere: a built-in it answered "not found" was off, an optional one it ran was on. Tools
    enabled but never called cannot be seen (docs/adapters/pi.md)."""
    rejected = {str(call["name"]) for call, result in pairs if is_not_found(str(call["name"]), result)}
    ran = {str(call["name"]) for call, result in pairs if result is not None
           and not is_not_found(str(call["name"]), result)}
    tools = tuple(t for t in PI_TOOLS if t not in rejected and (t in DEFAULT_TOOLS or t in ran))
    return tools, frozenset(rejected & ran)


def recorded_tools(messages: list[JsonObject]) -> tuple[str, ...] | None:
    """The tool loadout Pi 0.86.0 on records in its ``system`` messages (``toolsAdded`` / ``toolsRemoved``, applied
    in order, as Pi restores them on resume), else None (older Pi records none)."""
    names: list[str] = []
    seen = False
    for message in messages:
        if message.get("role") != "system":
            continue
        for key, add in (("toolsAdded", True), ("toolsRemoved", False)):
            listed = message.get(key)
            if not isinstance(listed, list):
                continue
            seen = True
            for tool in listed:
                name = tool.get("name") if isinstance(tool, dict) else None
                if not isinstance(name, str) or not name:
                    raise trajectory(f"a Pi system message lists a tool in {key} without a name")
                if name in names:
                    names.remove(name)
                if add:
                    names.append(name)
    return tuple(names) if seen else None


def _compacted(call: ToolCall, where: str | None) -> ToolCall:
    """A call made after a compaction seen only as an event: refused (its boundary's context holds a summary whose
    session entry the event stream does not have)."""
    if where is None or call.policy is CallPolicy.REFUSED:
        return call
    reason = (f"Pi compacted the context before this call (compaction at {where}): the event stream does not hold "
              "the compaction entry a rebuilt session needs (replay the session file instead)")
    return replace(call, policy=CallPolicy.REFUSED, policy_reason=reason)


def _tool_call(call: JsonObject, result: JsonObject | None, conflicts: frozenset[str]) -> ToolCall:
    name = str(call["name"])
    historical = None
    if result is not None:
        if result.get("toolName") != name:
            raise trajectory(f'Pi result for "{call["id"]}" does not match its tool name')
        historical = Observation(result.get("content"), bool(result.get("isError")))
    policy, reason = CallPolicy.FRESH, None
    if name in conflicts:
        policy, reason = CallPolicy.REFUSED, (f'the recording shows Pi both running and rejecting tool "{name}" (its '
                                              "tool set changed during the session); forkpoint cannot tell which "
                                              "set to replay with")
    elif name not in PI_TOOLS and not is_not_found(name, result):
        policy, reason = CallPolicy.REFUSED, (f'Pi ran tool "{name}", which is not one of its built-in tools '
                                              f"({', '.join(PI_TOOLS)}); forkpoint re-runs only Pi's own "
                                              "implementations and Pi's \"not found\" answer")
    return ToolCall(str(call["id"]), name, dict(call["arguments"]), historical, policy, reason, native=result)


def signature(message: JsonObject) -> ActionSignature:
    content = message.get("content")
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    calls = [b for b in blocks if b.get("type") == "toolCall"]
    return ActionSignature(
        text="\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text"),
        reasoning="\n\n".join(str(b.get("thinking", "")) for b in blocks if b.get("type") == "thinking"),
        tools=tuple((str(b.get("name")), dict(b.get("arguments") or {})) for b in calls),
    )


def model_turns(messages: list[JsonObject]) -> list[int]:
    """Indexes of the assistant messages the model produced (errored/aborted ones are never sent back)."""
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant" and m.get("stopReason") not in
            _SKIPPED_STOPS]


def _next_actions(native: PiNative) -> list[ActionSignature | None]:
    """[0] = the first model turn; [n] = the first model turn after batch n's last result."""
    turns = model_turns(native.messages)
    starts = [-1, *native.batch_end]
    actions: list[ActionSignature | None] = []
    for start in starts:
        after = next((i for i in turns if i > start), None)
        actions.append(signature(native.messages[after]) if after is not None else None)
    return actions


def dumps(value: Any) -> bytes:
    """Compact JSON the way Pi writes its session lines (JSON.stringify: no spaces, non-ASCII kept)."""
    return orjson.dumps(value)
