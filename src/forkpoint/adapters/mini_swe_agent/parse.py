"""Parse a mini-swe-agent trajectory (one JSON object) into the neutral Trajectory (pure apart from reading it).

Two schemas (docs/adapters/mini-swe-agent.md, measured on the real 1.17.5 and 2.4.6):

* ``mini-swe-agent-1`` (1.4-1.17; no ``trajectory_format`` key on 1.1-1.3): ``{role, content}`` messages; after
  system + task, assistant and user messages alternate. A turn whose content has exactly one action block
  (``info.config.agent.action_regex``) is a batch of one bash call, its observation the next user message; 0 or
  2+ blocks is a format-error turn (no call; kept verbatim).
* ``mini-swe-agent-1.1`` (2.x): OpenAI-shaped messages with ``extra``. An assistant message with
  ``extra.actions`` is a batch (parallel tool calls = one batch), its observations the following ``tool``/``user``
  messages (matched by ``tool_call_id``, else in order). A format error is a ``user`` message with
  ``extra.interrupt_type == "FormatError"`` (a model turn without an assistant message); ``exit`` ends the run.

The submitting turn (exit status ``Submitted``: the last model turn) is never a batch: a replay prefix cannot
contain the submission. It is the original next action after the last batch.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forkpoint.adapters.source import read_trajectory
from forkpoint.core.errors import ErrorKind, ReplayError, trajectory
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES
from forkpoint.core.model import ActionSignature, Batch, JsonObject, Observation, ToolCall, Trajectory

AGENT = "mini-swe-agent"
FORMAT_V1 = "mini-swe-agent-1"
FORMAT_V2 = "mini-swe-agent-1.1"
#: 1.16+ default; 1.0-1.15 hard-coded ``\n`` without the ``\s*``
DEFAULT_ACTION_REGEX = r"```bash\s*\n(.*?)\n```"
LEGACY_ACTION_REGEX = r"```bash\n(.*?)\n```"
_RETURNCODE = re.compile(r"<returncode>(-?\d+)</returncode>")
_TIMEOUT_PREFIX = "The last command <command>"


@dataclass(frozen=True)
class Turn:
    """One model turn: where it sits, its signature, and (for batches) which messages hold its observations."""

    index: int  # message index of the assistant message (2.x format error: of the interrupt message)
    signature: ActionSignature
    batch: bool
    end: int  # message index after the turn's last observation


@dataclass
class MiniNative:
    """What the rebuild needs: the whole object, the schema, and the model turns in order."""

    data: JsonObject
    format: str | None
    major: int
    turns: list[Turn]
    batch_turns: list[int] = field(default_factory=list)  # per batch: its index in ``turns``

    @property
    def messages(self) -> list[JsonObject]:
        messages: list[JsonObject] = self.data["messages"]
        return messages

    def prefix_calls(self, after_step: int) -> int:
        """Model calls inside the prefix cut after ``after_step`` batches (format-error turns count too)."""
        return self.batch_turns[after_step - 1] + 1 if after_step >= 1 else 0

    def batch_end(self, after_step: int) -> int:
        return self.turns[self.batch_turns[after_step - 1]].end if after_step >= 1 else 2


def parse_trajectory(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory[MiniNative]:
    try:
        raw = read_trajectory(path, max_bytes, "mini-swe-agent trajectory")
    except OSError as error:
        raise ReplayError(ErrorKind.CONFIGURATION, f"cannot read {path}: {error}") from None
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise trajectory(f"the mini-swe-agent trajectory is not valid JSON: {error}") from None
    return parse_object(data, path, hashlib.sha256(raw).hexdigest())


def parse_object(data: Any, path: Path, sha256: str) -> Trajectory[MiniNative]:
    if not isinstance(data, dict):
        raise trajectory("a mini-swe-agent trajectory is a JSON object")
    messages = data.get("messages")
    if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
        raise trajectory("mini-swe-agent trajectory has no list of message objects in 'messages'")
    for index, message in enumerate(messages):
        if not isinstance(message.get("role"), str):
            raise trajectory(f"mini-swe-agent message[{index}] has no role")
    info: JsonObject = data["info"] if isinstance(data.get("info"), dict) else {}
    fmt = data.get("trajectory_format")
    version = info.get("mini_version") if isinstance(info.get("mini_version"), str) else None
    if fmt not in (None, FORMAT_V1, FORMAT_V2):
        raise trajectory(f"unknown mini-swe-agent trajectory_format {fmt!r} (expected {FORMAT_V1!r} or {FORMAT_V2!r})")
    major = 2 if fmt == FORMAT_V2 else 1
    if version and version.split(".")[0] != str(major):
        raise trajectory(f"trajectory_format {fmt!r} was never written by mini-swe-agent {version}")
    if len(messages) < 2 or messages[0].get("role") != "system" or messages[1].get("role") != "user":
        raise trajectory("a mini-swe-agent trajectory starts with the system and the task (user) messages")
    turns = _turns_v2(messages) if major == 2 else _turns_v1(messages, _action_regex(info, version))
    turns = _without_submission(turns, messages, info, major)
    native = MiniNative(data, fmt if isinstance(fmt, str) else None, major, turns)
    batches: list[Batch] = []
    for position, turn in enumerate(turns):
        if turn.batch:
            native.batch_turns.append(position)
            calls = _calls_v2(messages, turn) if major == 2 else _calls_v1(messages, turn)
            batches.append(Batch(len(batches) + 1, calls, f"messages[{turn.index}]",
                                 native={"message_index": turn.index, "end": turn.end}))
    # next_actions[n]: the first model turn after batch n (a batch, a format error or the submission)
    starts = [0] + [position + 1 for position in native.batch_turns]
    next_actions = tuple(turns[start].signature if start < len(turns) else None for start in starts)
    refusals = _human_command_refusals(messages, native) if major == 2 else {}
    environment = _config(info).get("environment")
    cwd = environment.get("cwd") if isinstance(environment, dict) else None
    warnings: tuple[str, ...] = () if fmt else ("no trajectory_format key: read as the mini-swe-agent-1 schema "
                                                "(1.1-1.3)",)
    env_type = str(_config(info).get("environment_type") or "")
    if env_type and not env_type.endswith("environments.local.LocalEnvironment"):
        warnings += (f"environment: {env_type.rpartition('.')[2]} recorded; replay runs its actions locally "
                     f"(LocalEnvironment) in the workspace, which must be at the recorded cwd {cwd}",)
    return Trajectory.recorded(AGENT, version, path, sha256, session_id=None,
                               cwd=cwd if isinstance(cwd, str) and cwd else None, batches=batches,
                               next_actions=next_actions, boundary_refusals=refusals, warnings=warnings, native=native)


def _config(info: JsonObject) -> JsonObject:
    config = info.get("config")
    return config if isinstance(config, dict) else {}


def _action_regex(info: JsonObject, version: str | None) -> str:
    agent = _config(info).get("agent")
    configured = agent.get("action_regex") if isinstance(agent, dict) else None
    if isinstance(configured, str) and configured:
        return configured
    parts = tuple(int(p) for p in re.findall(r"\d+", version or "")[:2])
    return LEGACY_ACTION_REGEX if not parts or parts < (1, 16) else DEFAULT_ACTION_REGEX


def _text(content: Any) -> str:
    """Message content as text (a string, or the text parts of a multimodal list)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


# -- 1.x ------------------------------------------------------------------------------------------------------------


def _turns_v1(messages: list[JsonObject], regex: str) -> list[Turn]:
    turns: list[Turn] = []
    try:
        pattern = re.compile(regex, re.DOTALL)
    except re.error as error:
        raise trajectory(f"info.config.agent.action_regex is not a valid regular expression: {error}") from None
    for index in range(2, len(messages)):
        message = messages[index]
        if message["role"] != "assistant":
            continue
        content = _text(message.get("content"))
        actions = [a.strip() for a in pattern.findall(content) if isinstance(a, str)]
        observed = index + 1 < len(messages) and messages[index + 1]["role"] == "user"
        tools = (("bash", {"command": actions[0]}),) if len(actions) == 1 else ()
        signature = ActionSignature(content, "", tools)
        end = index + 2 if observed else index + 1
        turns.append(Turn(index, signature, batch=len(actions) == 1 and observed, end=end))
        if len(actions) == 1 and not observed:
            break  # the recording ends mid-step: an incomplete batch, nothing after it is usable
    return turns


def _calls_v1(messages: list[JsonObject], turn: Turn) -> tuple[ToolCall, ...]:
    command = turn.signature.tools[0][1]["command"]
    content = messages[turn.index + 1].get("content")
    historical = Observation(content, is_error_v1(_text(content)))
    return (ToolCall(f"mini-{turn.index}-1", "bash", {"command": command}, historical,
                     native={"message_index": turn.index, "action": {"command": command}}),)


def is_error_v1(observation: str) -> bool:
    """A 1.x observation is an error when it reports a non-zero ``<returncode>`` or is the timeout message.

    1.x keeps no raw return code, so both the historical and the fresh side are judged by this one rule.
    """
    if observation.startswith(_TIMEOUT_PREFIX):
        return True
    match = _RETURNCODE.search(observation[:200])
    return bool(match and match.group(1) != "0")


# -- 2.x ------------------------------------------------------------------------------------------------------------


def _actions(message: JsonObject, index: int) -> list[JsonObject]:
    extra = message.get("extra")
    actions = extra.get("actions") if isinstance(extra, dict) else None
    if actions is None:
        return []
    if not isinstance(actions, list):
        raise trajectory(f"mini-swe-agent message[{index}] has an invalid extra.actions")
    for action in actions:
        if not isinstance(action, dict) or not isinstance(action.get("command"), str):
            raise trajectory(f"mini-swe-agent message[{index}] has an invalid native action")
    return actions


def _is_format_error(message: JsonObject) -> bool:
    extra = message.get("extra")
    return message["role"] == "user" and isinstance(extra, dict) and extra.get("interrupt_type") == "FormatError"


def _signature_v2(message: JsonObject, actions: list[JsonObject]) -> ActionSignature:
    reasoning = message.get("reasoning_content")
    tools = tuple(("bash", {"command": a["command"]}) for a in actions)
    return ActionSignature(_text(message.get("content")), reasoning if isinstance(reasoning, str) else "", tools)


def _format_error_signature(message: JsonObject) -> ActionSignature:
    """What the model said in a rejected turn: only ``extra.response`` keeps it (2.x drops the assistant message)."""
    extra = message.get("extra") or {}
    response = extra.get("response") if isinstance(extra, dict) else None
    choice: Any = {}
    if isinstance(response, dict) and isinstance(response.get("choices"), list) and response["choices"]:
        choice = response["choices"][0].get("message") if isinstance(response["choices"][0], dict) else {}
    choice = choice if isinstance(choice, dict) else {}
    tools: list[tuple[str, JsonObject]] = []
    for call in choice.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except ValueError:
                arguments = {"_raw": function.get("arguments")}
            tools.append((str(function.get("name")), arguments if isinstance(arguments, dict) else {"_raw": arguments}))
    reasoning = choice.get("reasoning_content")
    return ActionSignature(_text(choice.get("content")), reasoning if isinstance(reasoning, str) else "", tuple(tools))


def _turns_v2(messages: list[JsonObject]) -> list[Turn]:
    turns: list[Turn] = []
    for index in range(2, len(messages)):
        message = messages[index]
        if _is_format_error(message):
            turns.append(Turn(index, _format_error_signature(message), batch=False, end=index + 1))
            continue
        if message["role"] != "assistant":
            continue
        actions = _actions(message, index)
        signature = _signature_v2(message, actions)
        if not actions:
            turns.append(Turn(index, signature, batch=False, end=index + 1))
            continue
        end = index + 1
        while end < len(messages) and end - index - 1 < len(actions) and messages[end]["role"] in ("tool", "user") \
                and not _is_format_error(messages[end]):
            end += 1
        complete = end - index - 1 == len(actions)
        turns.append(Turn(index, signature, batch=complete, end=end))
        if not complete:
            break
    return turns


def _call_id(message: JsonObject, action: JsonObject, position: int, index: int) -> str:
    if isinstance(action.get("tool_call_id"), str):
        return str(action["tool_call_id"])
    calls = message.get("tool_calls")
    if isinstance(calls, list) and position < len(calls) and isinstance(calls[position], dict) \
            and isinstance(calls[position].get("id"), str):
        return str(calls[position]["id"])
    return f"mini-{index}-{position + 1}"


def _calls_v2(messages: list[JsonObject], turn: Turn) -> tuple[ToolCall, ...]:
    message = messages[turn.index]
    actions = _actions(message, turn.index)
    observations = messages[turn.index + 1: turn.end]
    by_id = {o.get("tool_call_id"): o for o in observations if isinstance(o.get("tool_call_id"), str)}
    calls = []
    for position, action in enumerate(actions):
        call_id = _call_id(message, action, position, turn.index)
        observation = by_id.get(call_id) if "tool_call_id" in action else observations[position]
        if observation is None:
            raise trajectory(f"mini-swe-agent message[{turn.index}]: no observation for tool call {call_id}")
        calls.append(ToolCall(call_id, "bash", {"command": action["command"]},
                              Observation(observation.get("content"), is_error_v2(observation.get("extra"))),
                              native={"message_index": turn.index, "action": action}))
    return tuple(calls)


def is_error_v2(extra: Any) -> bool:
    """2.x observations carry the raw return code and the exception text in ``extra``."""
    if not isinstance(extra, dict):
        return False
    code = extra.get("returncode")
    return bool(extra.get("exception_info")) or (isinstance(code, int) and code != 0)


def _human_command_refusals(messages: list[JsonObject], native: MiniNative) -> dict[int, str]:
    """2.x human mode: a ``user`` message with ``extra.actions`` is a command the USER issued; forkpoint re-runs only
    the agent's actions, so a prefix holding one would keep its stale output silently: such boundaries are refused."""
    humans = [i for i, m in enumerate(messages) if m["role"] == "user" and _actions(m, i)]
    if not humans:
        return {}
    refusals = {}
    for number in range(1, len(native.batch_turns) + 1):
        inside = [i for i in humans if i < native.batch_end(number)]
        if inside:
            refusals[number] = (f"messages[{inside[0]}] is a command the user issued (InteractiveAgent human mode); "
                                "its output cannot be refreshed")
    return refusals


# -- the end of the run ----------------------------------------------------------------------------------------------


def _without_submission(turns: list[Turn], messages: list[JsonObject], info: JsonObject, major: int) -> list[Turn]:
    """The submitting turn is a final action, not a replayable batch."""
    if major == 2:
        last = messages[-1]
        extra: JsonObject = last["extra"] if isinstance(last.get("extra"), dict) else {}
        submitted = last["role"] == "exit" and extra.get("exit_status") == "Submitted"
    else:
        submitted = info.get("exit_status") == "Submitted"
    if not submitted or not turns or not turns[-1].signature.tools:
        return turns
    final = turns[-1]
    return [*turns[:-1], Turn(final.index, final.signature, batch=False, end=final.end)]
