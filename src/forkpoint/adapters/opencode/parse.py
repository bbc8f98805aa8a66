"""Parse OpenCode's native records into the neutral Trajectory (pure apart from reading the file).

Two inputs (measured on 1.17.11 and 1.18.33, see docs/adapters/opencode.md):

* the event log of ``opencode run --format=json``: one ``{"type", "timestamp", "sessionID", "part"}`` object
  per line, types ``step_start``, ``reasoning``, ``text``, ``tool_use``, ``step_finish`` and ``error``
  (``user`` events are accepted where a writer adds them; no verified version does). A ``tool_use`` is only
  written for a terminal state (``completed`` / ``error``), in completion order;
* the ``opencode export <session>`` JSON ``{"info": {...session...}, "messages": [{"info", "parts"}]}``: the
  full record (user prompt, every part, the session's ``version`` and ``permission``).

An event log lacks the prompt, the version, the message details and (without ``--thinking``) the reasoning, so it
is replayed together with the session's export (``--opencode-export``): every part the log holds must be in the
export and agree with it (same tool, call, input, status and result), and the session is the export's messages up
to the last message the log shows (a later run of the same session is not part of this log).

One step = one assistant message (``messageID``); one replay batch = the tool parts of one assistant message,
complete when the message has its ``step-finish`` part and every tool part is terminal. Parts are ordered by
part id, which is OpenCode's own storage order (for a parallel batch: call order). The same part id seen twice
is merged (a terminal state is never replaced by an earlier one), so a call is never replayed twice; call ids
come from the model and may repeat across runs, so a repeated one is made unique with its part id.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from forkpoint.adapters.kit.ids import OPENCODE_SESSION, check_id
from forkpoint.adapters.source import read_trajectory
from forkpoint.core.errors import trajectory
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES
from forkpoint.core.model import ActionSignature, Batch, CallPolicy, JsonObject, Observation, ToolCall, Trajectory

AGENT = "opencode"
TERMINAL = frozenset({"completed", "error"})
#: ``skill`` re-runs with OpenCode's own skill tool: its observation is a function of the skill files the workspace
#: holds (a skill the replay's OpenCode cannot find is a stale fallback, see tools.SKILL_MISSING)
FRESH_TOOLS = frozenset({"bash", "read", "write", "edit", "glob", "grep", "apply_patch", "skill"})
#: the reason code of a ``task`` call: its sub-agent's own calls live in a child session no export carries
SUBAGENT_MISSING = "subagent_transcript_missing"
STALE_REASONS = {
    "task": f"{SUBAGENT_MISSING}: it ran a sub-agent in a child session of the original run",
    "webfetch": "web content changes over time",
    "websearch": "web search results change over time",
    "list": "older OpenCode versions' directory listing; the verified versions (1.17, 1.18) no longer have it",
    "todowrite": "it updated the original session's todo list",
    "todoread": "it read the original session's todo list",
    "question": "it asked the original user a question",
    "invalid": "OpenCode rejected the original call (unknown tool or bad arguments); its error is reused",
}
PART_EVENTS = frozenset({"step_start", "reasoning", "text", "tool_use", "step_finish"})
#: OpenCode runs bash-tool commands with ``$SHELL`` (else ``bash`` on PATH), started as its full path, and a shell's
#: own error line begins with that path (``$0``): bash ``<path>: line N: ``, dash ``<path>: N: ``, zsh ``<path>:N: ``
_SHELL_ERROR = re.compile(r"^(/[^\s:]*/(?:bash|sh|dash|zsh|ksh|mksh))(?:: line \d+: |: \d+: |:\d+: )", re.M)
#: what must agree between a part of the event log and the same part of the export
_SAME_STATE = ("status", "input", "output", "error")


@dataclass
class OcMessage:
    """One message as OpenCode stores it: ``info`` (role, id, ...) and its parts in part-id order."""

    info: JsonObject
    parts: list[JsonObject]
    first_line: int | None = None

    @property
    def id(self) -> str:
        return str(self.info.get("id"))

    @property
    def role(self) -> str:
        return str(self.info.get("role"))

    def tool_parts(self) -> list[JsonObject]:
        return [part for part in self.parts if part.get("type") == "tool"]

    @property
    def finished(self) -> bool:
        return any(part.get("type") == "step-finish" for part in self.parts) or bool(self.info.get("finish"))


@dataclass
class OcNative:
    form: Literal["export", "events"]
    session: JsonObject | None  # the export's session info
    messages: list[OcMessage]
    batch_message: list[int] = field(default_factory=list)  # per batch: index into messages
    call_ids: dict[str, str] = field(default_factory=dict)  # part id -> the ToolCall.call_id used for it
    shell: str | None = None  # the shell the recorded bash tool ran (named by its own error lines), if shown

    @property
    def prompt_known(self) -> bool:
        return any(message.role == "user" for message in self.messages)


def parse_opencode(
    path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES, *, export: Path | None = None
) -> Trajectory[OcNative]:
    """Parse an export or an event log; ``export`` (the session's ``opencode export`` JSON) completes an event log."""
    data = _read(path, max_bytes)
    sha256 = hashlib.sha256(data).hexdigest()
    warnings: list[str] = []
    whole = _whole_json(data)
    if isinstance(whole, dict) and "info" in whole and "messages" in whole:
        native = _from_export(whole)
    else:
        native = _from_events(data, warnings)
    if export is not None:
        if native.form == "export":
            raise trajectory(f"{path} is already an `opencode export` JSON; --opencode-export completes an "
                             "`opencode run --format=json` event log")
        exported = _read(export, max_bytes)
        document = _whole_json(exported)
        if not (isinstance(document, dict) and "info" in document and "messages" in document):
            raise trajectory(f"{export} is not an `opencode export` JSON (an object with info and messages)")
        native = with_export(native, _from_export(document))
        warnings.append(f"the prompt, version and message details come from the OpenCode export {export} "
                        f"(sha256 {hashlib.sha256(exported).hexdigest()})")
    return _build(path, sha256, native, warnings)


def _read(path: Path, max_bytes: int) -> bytes:
    try:
        return read_trajectory(path, max_bytes, "OpenCode trajectory")
    except OSError as error:
        raise trajectory(f"cannot read {path}: {error}") from None


def _whole_json(data: bytes) -> Any:
    """The file as one JSON value (an export), or None (a JSONL log fails at its second line)."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


# -- export JSON ---------------------------------------------------------------------------------------------------


def _from_export(value: JsonObject) -> OcNative:
    info = value.get("info")
    messages = value.get("messages")
    if not isinstance(info, dict) or not isinstance(info.get("id"), str) or not info["id"]:
        raise trajectory("the OpenCode export has no session info with an id")
    if not isinstance(messages, list):
        raise trajectory("the OpenCode export has no messages list")
    out: list[OcMessage] = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("info"), dict):
            raise trajectory(f"export message {index} has no info object")
        minfo = message["info"]
        if minfo.get("role") not in ("user", "assistant") or not isinstance(minfo.get("id"), str):
            raise trajectory(f"export message {index} has no role user/assistant and id")
        parts = message.get("parts")
        if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
            raise trajectory(f"export message {index} ({minfo['id']}) has no list of part objects")
        for position, part in enumerate(parts):
            _check_part(part, f"export message {index} part {position}")
        out.append(OcMessage(minfo, sorted(parts, key=lambda p: str(p["id"]))))
    return OcNative("export", info, out)


def _check_part(part: JsonObject, where: str) -> None:
    if not isinstance(part.get("id"), str) or not isinstance(part.get("type"), str):
        raise trajectory(f"{where} has no id and type")
    if part["type"] == "tool":
        if not isinstance(part.get("tool"), str) or not isinstance(part.get("callID"), str):
            raise trajectory(f"{where} (tool part {part['id']}) has no tool name and callID")
        state = part.get("state")
        if not isinstance(state, dict) or not isinstance(state.get("status"), str):
            raise trajectory(f"{where} (tool part {part['id']}) has no state with a status")
        if state.get("input") is not None and not isinstance(state["input"], dict):
            raise trajectory(f"{where} (tool part {part['id']}) has a non-object input")


# -- run --format=json event log -------------------------------------------------------------------------------------


def _from_events(data: bytes, warnings: list[str]) -> OcNative:
    messages: dict[str, OcMessage] = {}
    parts: dict[str, dict[str, JsonObject]] = {}
    session_id: str | None = None
    raw_lines = data.split(b"\n")
    for number, raw in enumerate(raw_lines, start=1):
        if not raw.strip():
            continue
        try:
            event = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            if number == len(raw_lines):
                warnings.append(f"ignored a torn final line {number} (the log was cut mid-write)")
                continue
            raise trajectory(f"invalid JSON at line {number}: {error}", line=number) from None
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            raise trajectory(f"line {number} is not an OpenCode event (needs a type)", line=number)
        kind = event["type"]
        if session_id is None and isinstance(event.get("sessionID"), str):
            session_id = event["sessionID"]
        if kind == "user":
            _user_event(event, number, messages, parts)
        elif kind in PART_EVENTS:
            part = event.get("part")
            if not isinstance(part, dict):
                raise trajectory(f"OpenCode {kind} event at line {number} has no part", line=number)
            if kind == "tool_use" and not isinstance(part.get("state"), dict):
                raise trajectory(f"OpenCode tool event at line {number} has no state", line=number)
            message_id = part.get("messageID")
            if not isinstance(message_id, str) or not message_id:
                raise trajectory(f"OpenCode {kind} event at line {number} has no messageID", line=number)
            _check_part(part, f"line {number}")
            if message_id not in messages:
                messages[message_id] = OcMessage({"id": message_id, "role": "assistant"}, [], number)
                parts[message_id] = {}
            _merge(parts[message_id], part)
        elif kind == "error":
            warnings.append(f"line {number}: the run reported an error: {_error_text(event.get('error'))}")
        else:
            warnings.append(f"line {number}: ignored an unknown event type {kind!r}")
    out = []
    for message_id, message in messages.items():
        message.parts = sorted(parts[message_id].values(), key=lambda p: str(p["id"]))
        out.append(message)
    session = {"id": session_id} if session_id else None
    return OcNative("events", session, out)


def _user_event(event: JsonObject, number: int, messages: dict[str, OcMessage],
                parts: dict[str, dict[str, JsonObject]]) -> None:
    raw = event.get("parts", event.get("part"))
    items = raw if isinstance(raw, list) else [raw] if isinstance(raw, dict) else []
    texts = [p for p in items if isinstance(p, dict) and isinstance(p.get("text"), str)]
    if not texts:
        raise trajectory(f"OpenCode user event at line {number} has no text part", line=number)
    message_id = next((p["messageID"] for p in texts if isinstance(p.get("messageID"), str)), f"user-line-{number}")
    messages[message_id] = OcMessage({"id": message_id, "role": "user"}, [], number)
    parts[message_id] = {str(p.get("id") or f"prt_user_{number}_{i}"): {**p, "id": str(p.get("id") or
                                                                                           f"prt_user_{number}_{i}"),
                                                                          "type": "text"}
                         for i, p in enumerate(texts)}


def _merge(known: dict[str, JsonObject], part: JsonObject) -> None:
    """The same part seen again (a later state of one call): newer wins, but never over a terminal state."""
    previous = known.get(part["id"])
    if previous is not None and previous.get("type") == "tool" == part.get("type") \
            and previous["state"].get("status") in TERMINAL and part["state"].get("status") not in TERMINAL:
        return
    known[part["id"]] = part


def with_export(log: OcNative, full: OcNative) -> OcNative:
    """The event log's run, as the export records it (refused where they disagree); see the module docstring."""
    assert full.session is not None
    log_session = (log.session or {}).get("id")
    if log_session != full.session.get("id"):
        raise trajectory(f"the OpenCode export is of session {full.session.get('id')}, the event log of "
                         f"{log_session}; export the logged session: `opencode export {log_session}`")
    position = {message.id: index for index, message in enumerate(full.messages)}
    last = -1
    for message in log.messages:
        index = position.get(message.id)
        if index is None:
            raise trajectory(f"the OpenCode export lacks message {message.id} of the event log (an export of an "
                             "earlier state of the session?)")
        last = max(last, index)
        exported = {str(part["id"]): part for part in full.messages[index].parts}
        for part in message.parts:
            other = exported.get(str(part["id"]))
            if other is None or _differs(part, other):
                what = "lacks" if other is None else "disagrees with the event log on"
                raise trajectory(f"the OpenCode export {what} part {part['id']} of message {message.id}")
    return OcNative("export", full.session, full.messages[: last + 1])


def _differs(logged: JsonObject, exported: JsonObject) -> bool:
    if logged.get("type") != exported.get("type") or logged.get("text") != exported.get("text"):
        return True
    if logged.get("type") != "tool":
        return False
    if (logged["tool"], logged["callID"]) != (exported.get("tool"), exported.get("callID")):
        return True
    state, other = logged["state"], exported.get("state")
    return not isinstance(other, dict) or any(state.get(key) != other.get(key) for key in _SAME_STATE)


def recorded_shell(messages: list[OcMessage], warnings: list[str]) -> str | None:
    """The shell path a recorded bash output names in a shell error line (the first one; a second is warned of)."""
    seen: list[str] = []
    for message in messages:
        for part in message.tool_parts():
            state = part["state"]
            output = state.get("output") if part["tool"] == "bash" else None
            for match in _SHELL_ERROR.finditer(output if isinstance(output, str) else ""):
                if match.group(1) not in seen:
                    seen.append(match.group(1))
    if len(seen) > 1:
        warnings.append(f"the recorded bash outputs name several shells ({', '.join(seen)}); the tools re-run with "
                        f"SHELL={seen[0]}")
    return seen[0] if seen else None


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        data = error.get("data")
        if isinstance(data, dict) and isinstance(data.get("message"), str):
            return str(data["message"])[:300]
        return str(error.get("name") or error)[:300]  # a name, else the whole error
    return str(error)[:300]


# -- the neutral trajectory ------------------------------------------------------------------------------------------


def _check_ids(session: JsonObject, native: OcNative) -> str | None:
    """The session id names the prefix file and is ``opencode run --session`` / ``export``'s argument; message and
    part ids are imported into OpenCode's store: each must be one safe name (see forkpoint.adapters.kit.ids)."""
    session_id = session.get("id")
    if session_id is not None:
        check_id(session_id, "session id", shape=OPENCODE_SESSION, shape_name="an OpenCode session id (ses_…)")
    for message in native.messages:
        check_id(message.info.get("id"), "message id")
        for part in message.parts:
            check_id(part.get("id"), f"part id (message {message.id})")
    return session_id if isinstance(session_id, str) else None


def _build(path: Path, sha256: str, native: OcNative, warnings: list[str]) -> Trajectory[OcNative]:
    session = native.session or {}
    session_id = _check_ids(session, native)
    version = session.get("version") if isinstance(session.get("version"), str) else None
    cwd = session.get("directory") if isinstance(session.get("directory"), str) else None
    counts: dict[str, int] = {}
    for message in native.messages:
        for part in message.tool_parts():
            counts[part["callID"]] = counts.get(part["callID"], 0) + 1
    assistants = [i for i, message in enumerate(native.messages) if message.role == "assistant"]
    batches: list[Batch] = []
    next_actions: list[ActionSignature | None] = [_signature(native.messages[assistants[0]]) if assistants else None]
    complete_so_far = True
    for position, index in enumerate(assistants):
        message = native.messages[index]
        tools = message.tool_parts()
        if not tools:
            continue
        calls = []
        for part in tools:
            call_id = part["callID"] if counts[part["callID"]] == 1 else f"{part['callID']}@{part['id']}"
            native.call_ids[part["id"]] = call_id
            calls.append(_tool_call(call_id, part))
        complete = complete_so_far and message.finished and all(
            part["state"]["status"] in TERMINAL for part in tools)
        complete_so_far = complete
        locator = f"line:{message.first_line}" if message.first_line else f"message:{message.id}"
        batches.append(Batch(len(batches) + 1, tuple(calls), locator, complete))
        native.batch_message.append(index)
        following = assistants[position + 1] if position + 1 < len(assistants) else None
        next_actions.append(_signature(native.messages[following]) if following is not None else None)
    if native.form == "events" and not native.prompt_known:
        warnings.append("the event log holds no user prompt (OpenCode's run log never writes one); replaying "
                        "or continuing needs the session's `opencode export` JSON (--opencode-export)")
    native.shell = recorded_shell(native.messages, warnings)
    return Trajectory.recorded(AGENT, version, path, sha256, session_id=session_id, cwd=cwd, batches=batches,
                               next_actions=next_actions, warnings=warnings, native=native)


def _tool_call(call_id: str, part: JsonObject) -> ToolCall:
    state = part["state"]
    status = state["status"]
    arguments = state.get("input") if isinstance(state.get("input"), dict) else {}
    historical: Observation | None = None
    if status == "completed":
        historical = Observation(state.get("output") if isinstance(state.get("output"), str) else "")
    elif status == "error":
        historical = Observation(str(state.get("error") or ""), is_error=True)
    policy, reason = classify(part["tool"])
    if part["tool"] == "task":
        reason = task_reason(state)
    return ToolCall(call_id, part["tool"], arguments, historical, policy, reason, native=part)


def task_reason(state: JsonObject) -> str:
    """Why a ``task`` call stays stale, naming its child session: ``opencode export <session>`` writes one session's
    messages, never its sub-agents' child sessions, so the sub-agent's calls cannot be re-run from it."""
    metadata: JsonObject = state["metadata"] if isinstance(state.get("metadata"), dict) else {}
    child = metadata.get("sessionId")
    arguments: JsonObject = state["input"] if isinstance(state.get("input"), dict) else {}
    agent = arguments.get("subagent_type")
    who = f" {agent[:80]!r}" if isinstance(agent, str) and agent else ""
    where = (f"child session {child[:80]}" if isinstance(child, str) and child else
             "a child session the recording does not name")
    return (f"{SUBAGENT_MISSING}: the sub-agent{who} ran in {where}, whose messages (its own tool calls) an "
            "`opencode export` of the parent session does not carry; --allow-stale-observations reuses its answer "
            "without re-running its calls")


def classify(name: str) -> tuple[CallPolicy, str | None]:
    return CallPolicy.listed(name, FRESH_TOOLS, STALE_REASONS) or (
        CallPolicy.REFUSED, f"forkpoint does not know the OpenCode tool {name!r} (an MCP or plugin tool?)")


def _signature(message: OcMessage) -> ActionSignature:
    texts = [str(p.get("text") or "") for p in message.parts if p.get("type") == "text" and not p.get("synthetic")]
    reasoning = [str(p.get("text") or "") for p in message.parts if p.get("type") == "reasoning"]
    tools = tuple((str(p["tool"]), p["state"].get("input") if isinstance(p["state"].get("input"), dict) else {})
                  for p in message.tool_parts())
    return ActionSignature("\n\n".join(t for t in texts if t), "\n\n".join(r for r in reasoning if r), tools)
