"""Parse a Claude Code session JSONL into the neutral Trajectory (pure apart from reading the file).

Rules (measured on the real binaries, see docs/adapters/claude-code.md):
- Only lines with a string ``uuid`` belong to the conversation tree; everything else is bookkeeping.
- The leaf is the last non-sidechain tree record in file order, unless a later ``last-prompt`` line names
  ``leafUuid``. The active conversation is the ``parentUuid`` walk from the leaf to the root.
- Claude writes one assistant line per content block (shared ``message.id``) and one user line per tool
  result. Parallel calls of one response are therefore siblings: only one of them lies on the parent
  chain, the others are recovered by ``message.id`` (assistant blocks) and ``tool_use_id`` (results).
- A batch is every tool_use of one assistant response with all its results; a missing result makes the
  batch (and every later one) unselectable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from forkpoint.adapters.claude_code import policy
from forkpoint.adapters.claude_code.subagents import SubagentTranscript, attach_subagents
from forkpoint.adapters.kit.ids import check_id
from forkpoint.adapters.kit.jsondoc import load_jsonl_object
from forkpoint.adapters.source import read_trajectory
from forkpoint.core.errors import trajectory
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES, is_blank, split_line_views
from forkpoint.core.hashing import sha256_pending
from forkpoint.core.model import ActionSignature, Batch, CallPolicy, JsonObject, Observation, ToolCall, Trajectory

if TYPE_CHECKING:
    from pathlib import Path

AGENT = "claude-code"
LEAF_TYPES = frozenset({"user", "assistant", "attachment", "system"})
_STREAM_TYPES = frozenset({"system", "assistant", "user", "result", "stream_event"})


@dataclass
class Record:
    """One tree line of the session file: where it is and the little the rules need."""

    line: int  # 1-based line number
    offset: int  # byte offset of the line in the file
    length: int  # byte length without the line terminator
    type: str
    uuid: str
    parent: str | None
    sidechain: bool
    # What the rebuild needs of the parsed object, nothing more: ``{"message": {"id", "content"}}`` of an
    # assistant line, ``{"message": {"content"}}`` of a user line holding tool results, else None.
    data: JsonObject | None
    meta: bool = False  # an ``isMeta`` user line (e.g. Claude's note on a resized image, 2.1.220's PDF document)


@dataclass
class Turn:
    """One assistant response: its lines (siblings included), merged text, and tool calls."""

    message_id: str
    records: list[Record]
    text: str = ""
    reasoning: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    result_records: dict[str, Record] = field(default_factory=dict)

    def signature(self) -> ActionSignature:
        return ActionSignature(
            text=self.text,
            reasoning=self.reasoning,
            tools=tuple((call.name, call.arguments) for call in self.calls),
        )


@dataclass
class ClaudeNative:
    """Adapter-private data the rebuild needs: record positions and, per batch, its lines."""

    records: list[Record]
    chain: list[Record]
    batch_records: list[list[Record]]  # per batch (same order as Trajectory.batches)
    batch_terminals: list[Record]  # the last line of each batch in file order
    # The exact bytes that were parsed and hashed: prefixes are cut from them, so a file that changes after
    # the parse can never mix into a prefix (records' offsets point into these bytes).
    source: bytes = field(repr=False)
    #: the transcripts of the sub-agents whose calls are re-run, by the parent's Agent/Task call id (nested ones too)
    subagents: dict[str, SubagentTranscript] = field(default_factory=dict)


@dataclass
class _Scan:
    records: list[Record] = field(default_factory=list)
    by_uuid: dict[str, Record] = field(default_factory=dict)
    assistant_by_message: dict[str, list[Record]] = field(default_factory=dict)
    results: dict[str, tuple[Record, JsonObject]] = field(default_factory=dict)
    leaf: str | None = None
    leaf_line: int = 0
    versions: set[str] = field(default_factory=set)
    session_ids: set[str] = field(default_factory=set)
    cwd: str | None = None
    warnings: list[str] = field(default_factory=list)
    first_object: JsonObject | None = None
    stream_json: JsonObject | None = None  # a line of `claude -p --output-format stream-json` stdout
    #: a sub-agent's own file: every record is a sidechain record, and they are its conversation
    sidechain_file: bool = False
    #: tool_use id -> the ``toolUseResult`` of an Agent/Task result (``agentId``, ``status``, ``isAsync``)
    agent_results: dict[str, JsonObject] = field(default_factory=dict)
    #: tool_use id -> the recorded ``toolUseResult`` of an interactive tool's result (its answer: tool_interactive)
    use_results: dict[str, Any] = field(default_factory=dict)


def parse_session(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory[ClaudeNative]:
    """Read the session once; its SHA-256 is computed alongside the line scan (see ``sha256_pending``)."""
    source = read_trajectory(path, max_bytes, "Claude Code session")
    source_sha256 = sha256_pending((source,))
    scan = _Scan()
    for line_number, offset, body, terminated in split_line_views(source):
        _scan_line(scan, body, terminated, line_number, offset)
    return _build(path, source_sha256(), scan, source)


def _scan_line(scan: _Scan, raw: memoryview, terminated: bool, line: int, offset: int) -> None:
    length = len(raw)
    if length and raw[length - 1] == 0x0D:  # "\r"
        length -= 1
    if not length or is_blank(raw):
        raise trajectory(f"blank line at line {line} of the Claude Code session", line=line)
    # JSON allows the trailing "\r": the view is parsed as is, never copied
    obj = load_jsonl_object(raw, line, terminated=terminated, warnings=scan.warnings)
    if obj is None:
        return
    if scan.first_object is None:
        scan.first_object = obj
    kind = obj.get("type")
    if kind == "last-prompt":
        leaf = obj.get("leafUuid")
        if isinstance(leaf, str) and leaf:
            scan.leaf, scan.leaf_line = leaf, line
        return
    if "session_id" in obj and "parentUuid" not in obj and kind in _STREAM_TYPES:
        if scan.stream_json is None or kind == "system":
            scan.stream_json = obj  # stdout events are not conversation records (no parentUuid chain)
        return
    if "uuid" not in obj:
        return  # bookkeeping: queue-operation, summary, api-request*, cost-state, ...
    uuid = obj.get("uuid")
    if not isinstance(uuid, str) or not uuid:
        raise trajectory(f"line {line} has an invalid uuid", line=line)
    parent = obj.get("parentUuid")
    if parent is not None and (not isinstance(parent, str) or not parent):
        raise trajectory(f"line {line} has an invalid parentUuid", line=line)
    if not isinstance(kind, str):
        raise trajectory(f"line {line} has no record type", line=line)
    sidechain = obj.get("isSidechain") is True
    meta = kind == "user" and obj.get("isMeta") is True
    record = Record(line, offset, length, kind, uuid, parent, sidechain, None, meta)
    version = obj.get("version")
    if isinstance(version, str) and version:
        scan.versions.add(version)
    if sidechain and not scan.sidechain_file:
        return  # sub-agent transcript lines never shape the main conversation
    previous = scan.by_uuid.get(uuid)
    if previous is not None:
        raise trajectory(f"duplicate uuid {uuid} at lines {previous.line} and {line}", line=line)
    scan.records.append(record)
    scan.by_uuid[uuid] = record
    session = obj.get("sessionId")
    if isinstance(session, str) and session:
        scan.session_ids.add(session)
    if scan.cwd is None and isinstance(obj.get("cwd"), str):
        scan.cwd = obj["cwd"]
    if kind in LEAF_TYPES:
        scan.leaf, scan.leaf_line = uuid, line
    if kind == "assistant":
        _index_assistant(scan, record, obj)
    elif kind == "user":
        _index_results(scan, record, obj)


def _message(obj: JsonObject, record: Record, role: str) -> JsonObject:
    message = obj.get("message")
    if not isinstance(message, dict):
        raise trajectory(f"{record.type} line {record.line} has no message object", line=record.line)
    actual = message.get("role")
    if actual is not None and actual != role:
        raise trajectory(f"{record.type} line {record.line} has role {actual!r}", line=record.line)
    return message


def _index_assistant(scan: _Scan, record: Record, obj: JsonObject) -> None:
    message = _message(obj, record, "assistant")
    message_id = message.get("id")
    if not isinstance(message_id, str) or not message_id:
        raise trajectory(f"assistant line {record.line} has no message.id", line=record.line)
    scan.assistant_by_message.setdefault(message_id, []).append(record)
    record.data = {"message": {"id": message_id, "content": message.get("content")}}


def _index_results(scan: _Scan, record: Record, obj: JsonObject) -> None:
    content = _message(obj, record, "user").get("content")
    if not isinstance(content, list):
        return
    for block in content:
        if not isinstance(block, dict) or block.get("type") != "tool_result":
            continue
        tool_use_id = block.get("tool_use_id")
        if not isinstance(tool_use_id, str) or not tool_use_id:
            raise trajectory(f"tool_result at line {record.line} has no tool_use_id", line=record.line)
        earlier = scan.results.get(tool_use_id)
        if earlier is not None:
            raise trajectory(
                f"duplicate tool_result for {tool_use_id} at lines {earlier[0].line} and {record.line}",
                line=record.line,
            )
        scan.results[tool_use_id] = (record, block)
        record.data = {"message": {"content": content}}
        summary = obj.get("toolUseResult")
        if isinstance(summary, dict) and ("agentId" in summary or "isAsync" in summary):
            scan.agent_results[tool_use_id] = {key: summary.get(key) for key in ("agentId", "status", "isAsync")}
        if (isinstance(summary, dict) and ("answers" in summary or "isAgent" in summary)) or (
                isinstance(summary, str) and len(summary) < 4096):  # kept small: only what an answer can be
            scan.use_results[tool_use_id] = summary


def _build(path: Path, sha256: str, scan: _Scan, source: bytes) -> Trajectory[ClaudeNative]:
    if not scan.records:
        raise trajectory(_not_claude_message(scan))
    chain = _active_chain(scan)
    turns = _turns(scan, chain)
    if not turns:
        raise trajectory("the active conversation contains no assistant turns")
    batches: list[Batch] = []
    batch_records: list[list[Record]] = []
    terminals: list[Record] = []
    next_actions: list[ActionSignature | None] = [turns[0].signature()]
    refusals: dict[int, str] = {}
    chain_uuids = {record.uuid for record in chain}
    complete_so_far = True
    session_ids = sorted(scan.session_ids)
    if len(session_ids) > 1:
        raise trajectory(f"the session file mixes several session ids: {', '.join(session_ids)}")
    # The session id names the prefix file, the session file in the agent HOME and `claude --resume <id>`.
    session_id = check_id(session_ids[0], "sessionId") if session_ids else check_id(
        path.stem, "session id (the file name: no line has a sessionId)")
    transcripts: dict[str, SubagentTranscript] = {}
    if any(call.name in policy.ASYNC_LAUNCH_TOOLS for turn in turns for call in turn.calls):
        used = {call.call_id for turn in turns for call in turn.calls}
        for turn in turns:
            turn.calls = attach_subagents(turn.calls, scan.agent_results, path.parent, session_id, transcripts,
                                          used, _scan_transcript, depth=1)
    for index, turn in enumerate(turns):
        if not turn.calls:
            continue
        ordinal = len(batches) + 1
        complete = complete_so_far and len(turn.result_records) == len(turn.calls)
        lines = sorted([*turn.records, *turn.result_records.values()], key=lambda r: r.line)
        terminal = lines[-1]
        if complete and terminal.uuid not in chain_uuids:
            refusals[ordinal] = (
                f"the last line of batch {ordinal} (line {terminal.line}) is not on the active conversation"
            )
        if complete and ordinal not in refusals:
            meta = _meta_after(chain, terminal)
            if meta is not None:
                refusals[ordinal] = (
                    f"the original request after batch {ordinal} also carried the meta message Claude Code wrote "
                    f"after the results (line {meta.line}, e.g. a resized image's note or 2.1.220's PDF "
                    "document), which a resumed session cannot end with; continue from another boundary"
                )
        complete_so_far = complete
        batches.append(
            Batch(
                ordinal=ordinal,
                calls=tuple(turn.calls),
                locator=f"line:{turn.records[0].line}",
                complete=complete,
            )
        )
        batch_records.append(lines)
        terminals.append(terminal)
        following = turns[index + 1] if index + 1 < len(turns) else None
        next_actions.append(following.signature() if following else None)
    _refuse_split_async_agents(batches, refusals)
    versions = frozenset(scan.versions)
    return Trajectory(
        agent=AGENT,
        version=next(iter(versions)) if len(versions) == 1 else None,
        versions=versions,
        session_id=session_id,
        cwd=scan.cwd,
        source_path=path,
        source_sha256=sha256,
        batches=tuple(batches),
        next_actions=tuple(next_actions),
        boundary_refusals=refusals,
        warnings=tuple(scan.warnings),
        native=ClaudeNative(scan.records, chain, batch_records, terminals, source, transcripts),
    )


def _scan_transcript(source: bytes) -> tuple[list[Record], list[Turn], dict[str, JsonObject]]:
    """A sub-agent's own file (every record a sidechain one): its records, its turns and its Agent results."""
    scan = _Scan(sidechain_file=True)
    for line_number, offset, body, terminated in split_line_views(source):
        _scan_line(scan, body, terminated, line_number, offset)
    turns = _turns(scan, _active_chain(scan)) if scan.records else []
    return scan.records, turns, scan.agent_results


def _meta_after(chain: list[Record], terminal: Record) -> Record | None:
    """The first ``isMeta`` user line between a batch's last line and the next assistant line on the chain."""
    try:
        start = next(index for index, record in enumerate(chain) if record is terminal) + 1
    except StopIteration:
        return None
    for record in chain[start:]:
        if record.type == "assistant":
            return None
        if record.meta:
            return record
    return None


def _not_claude_message(scan: _Scan) -> str:
    from forkpoint.adapters.detect import guess_agent_from_object

    if scan.stream_json is not None:
        event = scan.stream_json
        where = "~/.claude/projects/<encoded cwd>/<session id>.jsonl"
        if isinstance(event.get("cwd"), str) and isinstance(event.get("session_id"), str):
            where = f"~/.claude/projects/{re.sub(r'[^A-Za-z0-9]', '-', event['cwd'])}/{event['session_id']}.jsonl"
        return (
            "this is the stdout of `claude --output-format stream-json`, not a Claude Code session file; "
            f"replay the session file it wrote ({where})"
        )

    guess = guess_agent_from_object(scan.first_object) if scan.first_object is not None else None
    if guess and guess != AGENT:
        return f"this file does not look like a Claude Code session (it looks like a {guess} trajectory)"
    return "no Claude Code conversation lines (records with a uuid) found in the file"


def _active_chain(scan: _Scan) -> list[Record]:
    leaf = scan.leaf
    if leaf is None:
        raise trajectory("the session has no conversation leaf")
    if leaf not in scan.by_uuid:
        raise trajectory(f"last-prompt at line {scan.leaf_line} names leafUuid {leaf}, which is not in the file")
    chain: list[Record] = []
    seen: set[str] = set()
    current: str | None = leaf
    while current is not None:
        if current in seen:
            raise trajectory(f"cycle in the parentUuid chain at {current}")
        seen.add(current)
        record = scan.by_uuid.get(current)
        if record is None:
            child = chain[-1]
            raise trajectory(
                f"line {child.line} names parentUuid {current}, which is not in the file", line=child.line
            )
        chain.append(record)
        current = record.parent
    chain.reverse()
    return chain


def _turns(scan: _Scan, chain: list[Record]) -> list[Turn]:
    turns: list[Turn] = []
    seen_ids: set[str] = set()
    tool_ids: set[str] = set()
    for record in chain:
        if record.type != "assistant":
            continue
        assert record.data is not None
        message_id = record.data["message"]["id"]
        if turns and turns[-1].message_id == message_id:
            continue
        if message_id in seen_ids:
            raise trajectory(
                f"assistant message {message_id} appears in two separate places of the active conversation "
                f"(line {record.line})",
                line=record.line,
            )
        seen_ids.add(message_id)
        turn = Turn(message_id, scan.assistant_by_message[message_id])
        _fill_turn(scan, turn, tool_ids)
        turns.append(turn)
    return turns


def _fill_turn(scan: _Scan, turn: Turn, tool_ids: set[str]) -> None:
    seen_inputs: dict[str, Any] = {}
    for record in turn.records:
        assert record.data is not None
        content = record.data["message"].get("content")
        if isinstance(content, str):
            turn.text = _merge_stream_text(turn.text, content)
            continue
        if not isinstance(content, list):
            continue
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text" and isinstance(block.get("text"), str):
                turn.text = _merge_stream_text(turn.text, block["text"])
            elif kind == "thinking" and isinstance(block.get("thinking"), str):
                turn.reasoning = _merge_stream_text(turn.reasoning, block["thinking"])
            elif kind in ("tool_use", "server_tool_use"):
                _add_call(scan, turn, record, block, seen_inputs, tool_ids)


def _add_call(
    scan: _Scan,
    turn: Turn,
    record: Record,
    block: JsonObject,
    seen_inputs: dict[str, Any],
    tool_ids: set[str],
) -> None:
    call_id = block.get("id")
    if not isinstance(call_id, str) or not call_id:
        raise trajectory(f"tool_use at line {record.line} has no id", line=record.line)
    arguments = block.get("input")
    if not isinstance(arguments, dict):
        raise trajectory(f"tool input of {call_id} (line {record.line}) is not an object", line=record.line)
    if call_id in seen_inputs:
        if seen_inputs[call_id] != arguments:
            raise trajectory(f"tool_use {call_id} is written twice with different inputs", line=record.line)
        return  # the same block re-written by a streaming update
    if call_id in tool_ids:
        raise trajectory(f"duplicate tool_use id {call_id} (line {record.line})", line=record.line)
    tool_ids.add(call_id)
    seen_inputs[call_id] = arguments
    name = block.get("name") if isinstance(block.get("name"), str) else ""
    assert isinstance(name, str)
    historical: Observation | None = None
    result = scan.results.get(call_id)
    if result is not None:
        result_record, result_block = result
        if result_record.line < record.line:
            raise trajectory(
                f"tool_result for {call_id} (line {result_record.line}) comes before its tool_use",
                line=result_record.line,
            )
        historical = Observation(result_block.get("content"), result_block.get("is_error") is True)
        turn.result_records[call_id] = result_record
    reason: str | None
    if block.get("type") == "server_tool_use":
        call_policy, reason = CallPolicy.REFUSED, "server-side tools run at the model provider"
    else:
        version = next(iter(scan.versions)) if len(scan.versions) == 1 else None
        recorded = scan.use_results.get(call_id) if name in policy.INTERACTIVE_TOOLS else None
        call_policy, reason = policy.classify(name, arguments, historical, version, recorded)
    turn.calls.append(ToolCall(call_id, name, arguments, historical, call_policy, reason,
                               native=scan.use_results.get(call_id) if name in policy.INTERACTIVE_TOOLS else None,
                               mcp=policy.mcp_tool(name, reason)))


def _merge_stream_text(existing: str, incoming: str) -> str:
    """Old versions re-wrote growing text per line; new ones write each block once. Handle both."""
    if not incoming or incoming == existing or existing.startswith(incoming):
        return existing
    if not existing or incoming.startswith(existing):
        return incoming
    return f"{existing}\n\n{incoming}"


def _refuse_split_async_agents(batches: list[Batch], refusals: dict[int, str]) -> None:
    """A background sub-agent launched before a boundary and collected after it cannot be rebuilt."""
    for batch in batches:
        for call in batch.calls:
            if not policy.is_async_launch(call.name, call.arguments):
                continue
            collected_at = _collection_batch(batches, batch.ordinal, call)
            last_open = collected_at - 1 if collected_at is not None else len(batches)
            reason = (
                f"background sub-agent {call.name}({call.call_id}) launched in batch {batch.ordinal} is "
                + (f"collected in batch {collected_at}" if collected_at else "never collected in the recording")
            )
            for ordinal in range(batch.ordinal, last_open + 1):
                refusals.setdefault(ordinal, reason)


def _collection_batch(batches: list[Batch], launched: int, launch: ToolCall) -> int | None:
    launch_text = launch.historical.text if launch.historical else ""
    for batch in batches[launched:]:
        for call in batch.calls:
            if call.name not in policy.ASYNC_COLLECT_TOOLS:
                continue
            for value in call.arguments.values():
                if isinstance(value, str) and len(value) >= 4 and value in launch_text:
                    return batch.ordinal
    return None
