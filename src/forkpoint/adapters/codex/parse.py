"""Parse a Codex rollout JSONL into the neutral Trajectory (pure apart from reading the file).

Rules (measured on 0.149.0 / 0.171.0, see docs/adapters/codex.md):
- Every line is ``{"timestamp", "type", "payload"}`` (0.149 adds ``ordinal``); ``session_meta`` must be the
  first line and is the ONLY source of the native session id.
- The model-visible history is the ``response_item`` lines. A batch is every ``function_call`` /
  ``custom_tool_call`` of one model response (a run of call items, possibly around reasoning / assistant
  message items, ended by the first tool output or by a user/developer message) with all their outputs,
  paired by ``call_id``. Parallel outputs are written after both calls, in call order.
- ``event_msg``, ``turn_context``, ``world_state`` and unknown line types are tolerated; a bad final line
  without a trailing newline is a torn write and is ignored with a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters.kit.ids import UUID, check_id, shown
from forkpoint.adapters.kit.jsondoc import load_jsonl_object
from forkpoint.adapters.source import read_trajectory
from forkpoint.core.errors import trajectory
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES, is_blank, split_line_views
from forkpoint.core.hashing import sha256_pending
from forkpoint.core.model import ActionSignature, Batch, CallPolicy, JsonObject, Observation, ToolCall, Trajectory
from forkpoint.core.releases import number as release_number

AGENT = "codex"
CALL_TYPES = frozenset({"function_call", "custom_tool_call"})
OUTPUT_TYPES = frozenset({"function_call_output", "custom_tool_call_output"})
FRESH_TOOLS = frozenset({"exec_command", "write_stdin", "shell", "shell_command", "apply_patch", "update_plan",
                         "view_image"})
#: the line types whose payload the parse reads beyond its ``type`` (event_msg, turn_context... keep only that)
_KEPT_PAYLOADS = frozenset({"session_meta", "response_item"})
_STALE_REASONS = {
    "web_search": "web search results change over time",
    "request_user_input": "it asked the original user a question",
    "tool_search": "it reflects the original session's tool registry",
}


@dataclass
class Line:
    index: int  # 0-based
    offset: int
    length: int
    type: str
    payload: JsonObject


@dataclass
class CodexNative:
    lines: list[Line]
    batch_end: list[int]  # per batch: index of its last output line
    session_meta: JsonObject
    source: bytes = field(repr=False)  # the exact bytes parsed and hashed; line offsets point into them
    response_starts: list[int] = field(default_factory=list)  # line index of each model response's first item
    batch_response: list[int] = field(default_factory=list)  # per batch: ordinal (0-based) of its response

    def response_starts_before(self, after_step: int) -> int:
        """How many model responses belong to the prefix cut after ``after_step`` batches."""
        return self.batch_response[after_step - 1] + 1 if after_step >= 1 else 0


@dataclass
class _Response:
    """One model response: its items in order (reasoning, assistant text, tool calls)."""

    first_line: int
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[Line] = field(default_factory=list)

    def signature(self) -> ActionSignature:
        return ActionSignature(
            text="\n\n".join(t for t in self.text if t),
            reasoning="\n\n".join(r for r in self.reasoning if r),
            tools=tuple((_call_name(c.payload), _call_arguments(c.payload)) for c in self.calls),
        )


def parse_rollout(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory[CodexNative]:
    """Read the rollout once; its SHA-256 is computed alongside the line scan (see ``sha256_pending``)."""
    source = read_trajectory(path, max_bytes, "Codex rollout")
    source_sha256 = sha256_pending((source,))
    lines: list[Line] = []
    warnings: list[str] = []
    for number, offset, body, terminated in split_line_views(source):
        line = _parse_line(body, terminated, number, offset, warnings)
        if line is not None:
            lines.append(line)
    return _build(path, source_sha256(), lines, warnings, source)


def _parse_line(body: memoryview, terminated: bool, number: int, offset: int, warnings: list[str]) -> Line | None:
    if is_blank(body):
        return None
    obj = load_jsonl_object(body, number, terminated=terminated, warnings=warnings)
    if obj is None:
        return None
    kind = obj.get("type")
    payload = obj.get("payload")
    if not isinstance(kind, str) or not isinstance(payload, dict):
        from forkpoint.adapters.codex.spec import exec_json_event

        if exec_json_event(obj):
            thread = obj.get("thread_id") if isinstance(obj.get("thread_id"), str) else "<thread id>"
            raise trajectory(
                "this is the stdout of `codex exec --json`, not a Codex rollout; replay the rollout it wrote "
                f"(~/.codex/sessions/YYYY/MM/DD/rollout-*-{shown(thread)}.jsonl)", line=number)
        raise trajectory(f"line {number} is not a Codex rollout line (needs type and payload)", line=number)
    if not isinstance(obj.get("timestamp"), str):
        raise trajectory(f"line {number} has no timestamp", line=number)
    if kind not in _KEPT_PAYLOADS:  # only an event's type is ever read: a huge answer's UI copies are not kept
        payload = {"type": payload["type"]} if "type" in payload else {}
    return Line(number - 1, offset, len(body), kind, payload)


def _build(path: Path, sha256: str, lines: list[Line], warnings: list[str], source: bytes) -> Trajectory[CodexNative]:
    if not lines or lines[0].type != "session_meta":
        raise trajectory("the rollout does not start with a session_meta line (the native session id is there)")
    meta = lines[0].payload
    session_id = meta.get("id")
    if not isinstance(session_id, str) or not session_id:
        raise trajectory("session_meta has no id: forkpoint never continues a rollout as a brand-new session")
    # the thread id names the rollout file (prefix, CODEX_HOME) and is `codex exec resume <id>`'s argument
    check_id(session_id, "session_meta.id", shape=UUID, shape_name="a UUID (Codex thread ids are UUIDs)")
    version = meta.get("cli_version") if isinstance(meta.get("cli_version"), str) else None
    cwd = meta.get("cwd") if isinstance(meta.get("cwd"), str) else None

    outputs: dict[str, Line] = {}
    for line in lines:
        if line.type == "response_item" and _item_type(line.payload) in OUTPUT_TYPES:
            call_id = line.payload.get("call_id")
            if not isinstance(call_id, str) or not call_id:
                raise trajectory(f"tool output at line {line.index + 1} has no call_id", line=line.index + 1)
            if call_id in outputs:
                raise trajectory(f"duplicate output for call {call_id} (line {line.index + 1})", line=line.index + 1)
            if "\x00" in call_id:  # a replayed command gets it as CODEX_TOOL_CALL_ID: no NUL in an environment
                raise trajectory(f"call_id {shown(call_id)} at line {line.index + 1} contains a NUL byte",
                                 line=line.index + 1)
            outputs[call_id] = line

    responses = _responses(lines)
    batches: list[Batch] = []
    batch_end: list[int] = []
    batch_response: list[int] = []
    next_actions: list[ActionSignature | None] = [responses[0].signature() if responses else None]
    complete_so_far = True
    seen_calls: set[str] = set()
    for index, response in enumerate(responses):
        if not response.calls:
            continue
        calls = []
        ends = []
        for call_line in response.calls:
            call = _tool_call(call_line, outputs, seen_calls, version)
            output = outputs.get(call.call_id)
            image = _image_message_040(call, output, lines)
            if image is not None:  # 0.40's view_image: the image message is the observation, in the batch
                call = replace(call, historical=Observation(image.payload["content"]), policy=CallPolicy.FRESH,
                               policy_reason=None)
            calls.append(call)
            if output is not None:
                if output.index < call_line.index:
                    raise trajectory(f"output of {call.call_id} comes before its call", line=output.index + 1)
                ends.append(output.index if image is None else image.index)
        complete = complete_so_far and len(ends) == len(calls)
        complete_so_far = complete
        batches.append(Batch(len(batches) + 1, tuple(calls), f"line:{response.calls[0].index + 1}", complete))
        batch_end.append(max(ends) if ends else -1)
        batch_response.append(index)
        following = responses[index + 1] if index + 1 < len(responses) else None
        next_actions.append(following.signature() if following else None)
    native = CodexNative(lines, batch_end, meta, source, [r.first_line for r in responses], batch_response)
    return Trajectory.recorded(AGENT, version, path, sha256, session_id=session_id, cwd=cwd, batches=batches,
                               next_actions=next_actions, warnings=warnings, native=native)


def _responses(lines: list[Line]) -> list[_Response]:
    """Group model-output items into responses: a tool output, a user/developer message or the ``token_count``
    event Codex writes after every model response ends one (so a call whose output the rollout lacks, as when Codex
    answered it with an invented ``aborted``, never pulls the next response's calls into its batch)."""
    responses: list[_Response] = []
    current: _Response | None = None
    for line in lines:
        if line.type == "event_msg" and line.payload.get("type") == "token_count":
            current = None
            continue
        if line.type != "response_item":
            continue
        item = line.payload
        kind = _item_type(item)
        role = item.get("role")
        if kind in OUTPUT_TYPES or (kind == "message" and role in ("user", "developer", "system")):
            current = None
            continue
        if kind not in CALL_TYPES and kind not in ("message", "reasoning"):
            continue
        if current is None:
            current = _Response(line.index)
            responses.append(current)
        if kind in CALL_TYPES:
            current.calls.append(line)
        elif kind == "message":
            current.text.append(_message_text(item))
        else:
            current.reasoning.append(_reasoning_text(item))
    return responses


def _item_type(item: JsonObject) -> str | None:
    """The item's ``type`` when it is a string (a list or object there must not break set lookups)."""
    kind = item.get("type")
    return kind if isinstance(kind, str) else None


def _message_text(item: JsonObject) -> str:
    parts = item.get("content")
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    return "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def _reasoning_text(item: JsonObject) -> str:
    texts = []
    for key in ("summary", "content"):
        parts = item.get(key)
        if isinstance(parts, list):
            texts += [str(p["text"]) for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)]
    return "\n".join(texts)


def _call_name(item: JsonObject) -> str:
    name = item.get("name")
    return name if isinstance(name, str) else ""


def _call_arguments(item: JsonObject) -> JsonObject:
    """function_call arguments are a JSON string; custom tools carry free text as ``input``."""
    if item.get("type") == "custom_tool_call":
        raw_input = item.get("input")
        return {"input": raw_input if isinstance(raw_input, str) else ""}
    raw = item.get("arguments")
    if isinstance(raw, str):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {"_raw_arguments": raw}
        return value if isinstance(value, dict) else {"_raw_arguments": raw}
    return raw if isinstance(raw, dict) else {}


def _tool_call(line: Line, outputs: dict[str, Line], seen: set[str], version: str | None = None) -> ToolCall:
    item = line.payload
    call_id = item.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise trajectory(f"tool call at line {line.index + 1} has no call_id", line=line.index + 1)
    if call_id in seen:
        raise trajectory(f"duplicate call_id {call_id} (line {line.index + 1})", line=line.index + 1)
    seen.add(call_id)
    name = _call_name(item)
    arguments = _call_arguments(item)
    output = outputs.get(call_id)
    historical = Observation(output.payload.get("output")) if output is not None else None
    policy, reason = classify(name, arguments, historical)
    if name == "view_image" and policy is CallPolicy.FRESH and _before_view_image_measured(version):
        policy, reason = CallPolicy.STALE, VIEW_IMAGE_UNMEASURED
    return ToolCall(call_id, name, arguments, historical, policy, reason, native=line.index)


#: view_image before 0.149 (measured on 0.40.0, fixture ``view_image_040``): the call's output is always the constant
#: ``attached local image path`` (a missing file, a directory and a text file too), and the image goes to the model
#: in a SEPARATE user message right after it: ``[{"type": "input_image", "image_url": "data:<MIME from the
#: extension>;base64,<file bytes unchanged>"}]`` (a 2100-px PNG and a ``.txt`` as ``text/plain`` included), or
#: ``[]`` when the file cannot be read. A call in that form re-runs (``tool_image.view_image_040``): its observation
#: is that message's content (compared, and written back into the rebuilt rollout), and its batch ends after it; a
#: recording in any other form stays stale with this reason.
#: the first release whose view_image re-runs in the verified versions' form (before it: 0.40's, as above)
VIEW_IMAGE_MEASURED_FROM = (0, 149, 0)
VIEW_IMAGE_UNMEASURED = (
    "view_image of a Codex recording before 0.149 not in 0.40's measured form (the output 'attached local image "
    "path' followed by the image in its own user message, fixture view_image_040); the recorded image is reused")
ATTACHED_040 = "attached local image path"


def _image_message_040(call: ToolCall, output: Line | None, lines: list[Line]) -> Line | None:
    """The user message carrying a 0.40 view_image's image (the line right after its constant output), else None."""
    if call.name != "view_image" or call.policy_reason != VIEW_IMAGE_UNMEASURED or output is None:
        return None
    if output.payload.get("output") != ATTACHED_040 or output.index + 1 >= len(lines):
        return None
    line = lines[output.index + 1]
    item = line.payload
    if line.index != output.index + 1 or line.type != "response_item" or _item_type(item) != "message" \
            or item.get("role") != "user" or not isinstance(item.get("content"), list):
        return None
    content = item["content"]
    if content == []:
        return line
    if len(content) == 1 and isinstance(content[0], dict) and set(content[0]) == {"type", "image_url"} \
            and content[0]["type"] == "input_image" and isinstance(content[0]["image_url"], str):
        return line
    return None


def _before_view_image_measured(version: str | None) -> bool:
    value = release_number(version)
    return value is None or value < VIEW_IMAGE_MEASURED_FROM


def classify(name: str, arguments: JsonObject, historical: Observation | None) -> tuple[CallPolicy, str | None]:
    if "_raw_arguments" in arguments:
        return CallPolicy.STALE, "Codex could not parse the original arguments; its error is reused"
    return CallPolicy.listed(name, FRESH_TOOLS, _STALE_REASONS) or (
        CallPolicy.REFUSED, f"forkpoint does not know the Codex tool {name!r}")


def payload_text(value: Any) -> str:
    return value if isinstance(value, str) else orjson.dumps(value).decode()
