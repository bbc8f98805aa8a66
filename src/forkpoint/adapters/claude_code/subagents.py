"""Claude Code sub-agents (the Agent / Task tool): find a sub-agent's own transcript and turn its calls into calls the
replay re-runs, in order, right before the parent's Agent call (whose observation is the sub-agent's final answer,
reused as recorded: ``subagent_answer_reused``).

Measured on 2.1.220 and 2.1.332 (fixture ``subagent``): a foreground sub-agent (``run_in_background: false``)
writes its conversation to ``<session folder>/<session-id>/subagents/agent-<agentId>.jsonl`` (every record
``isSidechain: true`` with ``agentId``; the first is the prompt as a user message, then Claude's usual one line per
block and per result) and ``agent-<agentId>.meta.json`` (``agentType``, ``description``, ``toolUseId``); the
parent's result names it in ``toolUseResult.agentId``. Recordings of 2.0.x (public ones) name an 8-hex ``agentId``
and kept ``agent-<agentId>.jsonl`` beside the session file: both places are looked in.

The files come from a stranger: the id must be one plain name (no path), and every file is read below the session
folder with ``core.fs``' strict reader (no symlink followed anywhere on the way, no FIFO or device opened, at most
``MAX_TRANSCRIPT_BYTES``). A refused file makes the call REFUSED (never followed, no opt-out); a missing or
incomplete transcript makes it STALE with the file named (``--allow-stale-observations`` reuses the answer without
re-running the sub-agent's calls).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from forkpoint.adapters.claude_code import policy
from forkpoint.core.errors import ReplayError
from forkpoint.core.fs import (
    DEFAULT_MAX_INPUT_BYTES,
    ConfinementError,
    InputTooLargeError,
    NotRegularFileError,
    read_file_strict,
)
from forkpoint.core.model import CallPolicy, JsonObject, ToolCall

if TYPE_CHECKING:
    from pathlib import Path

#: the parser's reading of a sub-agent file: (records, turns, Agent results by call id); a ReplayError when it is not
#: a Claude Code session (parse.py passes it in: this module never imports the parser)
Scanner = Callable[[bytes], tuple[list[Any], list[Any], dict[str, JsonObject]]]


@dataclass
class SubagentTranscript:
    """One sub-agent's own session file (``<session-id>/subagents/agent-<id>.jsonl``) as read, and its records."""

    agent_id: str
    relative: str  # where it was found, relative to the session file's folder
    source: bytes = field(repr=False)
    records: list[Any] = field(repr=False)  # parse.Record
    meta: bytes | None = field(default=None, repr=False)  # its ``agent-<id>.meta.json`` when present

#: the quality reason of a parent's Agent/Task observation whose sub-agent's calls were re-run
ANSWER_REUSED = "subagent_answer_reused"
#: one sub-agent transcript is read whole, at most this many bytes (the session file's own bound)
MAX_TRANSCRIPT_BYTES = DEFAULT_MAX_INPUT_BYTES
MAX_META_BYTES = 64 * 1024
#: sub-agents of sub-agents are followed this deep (2.1.332 spawns depth 2 when a sub-agent calls Agent)
MAX_DEPTH = 4
#: what Claude writes as ``agentId`` (17 hex-like characters on 2.1.x, 8 hex on 2.0.x): one plain file-name part
_AGENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def transcript_paths(session_id: str, agent_id: str) -> tuple[str, str]:
    """Where the binaries keep a sub-agent's transcript, relative to the session file's folder (newest first)."""
    return f"{session_id}/subagents/agent-{agent_id}.jsonl", f"agent-{agent_id}.jsonl"


def attach_subagents(calls: list[ToolCall], agent_results: dict[str, JsonObject], folder: Path, session_id: str,
                     transcripts: dict[str, SubagentTranscript], used_ids: set[str], scanner: Scanner, *,
                     depth: int) -> list[ToolCall]:
    """``calls`` with each completed foreground Agent/Task call carrying its sub-agent's calls (``subcalls``) and
    policy REUSED, or STALE / REFUSED with the reason (the transcript's file named)."""
    out = []
    for call in calls:
        if call.name not in policy.ASYNC_LAUNCH_TOOLS or call.policy is not CallPolicy.STALE:
            out.append(call)
            continue
        out.append(_attach(call, agent_results.get(call.call_id) or {}, folder, session_id, transcripts, used_ids,
                           scanner, depth))
    return out


def _attach(call: ToolCall, summary: JsonObject, folder: Path, session_id: str,
            transcripts: dict[str, SubagentTranscript], used_ids: set[str], scanner: Scanner, depth: int) -> ToolCall:
    if policy.is_async_launch(call.name, call.arguments) or summary.get("isAsync") is True:
        return replace(call, policy_reason="a background sub-agent runs alongside the parent's later turns (its "
                                           "calls interleave with them), so its order cannot be replayed")
    if call.historical is None or call.historical.is_error or summary.get("status") != "completed":
        return call  # the sub-agent did not complete (or never started): its recorded error stays stale
    agent_id = summary.get("agentId")
    if not isinstance(agent_id, str):
        return replace(call, policy_reason="the recording does not name the sub-agent (no toolUseResult.agentId), "
                                           "so its transcript cannot be found")
    if _AGENT_ID.fullmatch(agent_id) is None:
        return replace(call, policy=CallPolicy.REFUSED, policy_reason=(
            f"the sub-agent id {agent_id[:80]!r} is not a plain name: as a file name it would point outside the "
            "session folder"))
    if depth > MAX_DEPTH:
        return replace(call, policy_reason=f"sub-agents nested deeper than {MAX_DEPTH} are not followed")
    found = _read_transcript(folder, session_id, agent_id)
    if isinstance(found, tuple):
        kind, reason = found
        return replace(call, policy=kind, policy_reason=reason)
    return _with_transcript(call, found, folder, session_id, transcripts, used_ids, scanner, depth)


def _read_transcript(folder: Path, session_id: str, agent_id: str) -> SubagentTranscript | tuple[CallPolicy, str]:
    candidates = transcript_paths(session_id, agent_id)
    for relative in candidates:
        try:
            source = read_file_strict(folder, relative, max_bytes=MAX_TRANSCRIPT_BYTES)
        except FileNotFoundError:
            continue
        except (ConfinementError, NotRegularFileError, InputTooLargeError) as error:
            return CallPolicy.REFUSED, (f"the sub-agent transcript {folder / relative} is refused: {error} "
                                        "(forkpoint follows no link and opens no FIFO or device there, and reads at "
                                        f"most {MAX_TRANSCRIPT_BYTES} bytes)")
        except OSError as error:
            return CallPolicy.STALE, f"the sub-agent transcript {folder / relative} cannot be read: {error.strerror}"
        meta = relative.removesuffix(".jsonl") + ".meta.json"
        try:
            meta_bytes: bytes | None = read_file_strict(folder, meta, max_bytes=MAX_META_BYTES)
        except FileNotFoundError:
            meta_bytes = None
        except (ConfinementError, NotRegularFileError, InputTooLargeError, OSError) as error:
            return CallPolicy.REFUSED, f"the sub-agent's {folder / meta} is refused: {error}"
        return SubagentTranscript(agent_id, relative, source, [], meta_bytes)
    looked = " and ".join(str(folder / relative) for relative in candidates)
    return CallPolicy.STALE, (f"the sub-agent's transcript is missing (looked for {looked}); copy the session's "
                              "sub-agent files next to it, or pass --allow-stale-observations to reuse its answer "
                              "without re-running its calls")


def _with_transcript(call: ToolCall, transcript: SubagentTranscript, folder: Path, session_id: str,
                     transcripts: dict[str, SubagentTranscript], used_ids: set[str], scanner: Scanner,
                     depth: int) -> ToolCall:
    shown = folder / transcript.relative
    try:
        records, turns, agent_results = scanner(transcript.source)
    except ReplayError as error:
        return replace(call, policy=CallPolicy.REFUSED, policy_reason=f"the sub-agent transcript {shown} is not a "
                                                                      f"Claude Code sub-agent session: {error.message}")
    if any(not record.sidechain for record in records):
        return replace(call, policy=CallPolicy.REFUSED, policy_reason=(
            f"the sub-agent transcript {shown} holds records that are not sidechain records"))
    if not turns or turns[-1].calls or any(len(turn.result_records) != len(turn.calls) for turn in turns):
        return replace(call, policy_reason=f"the sub-agent transcript {shown} is incomplete (a call without its "
                                           "result, or no final answer)")
    label = f"agent-{transcript.agent_id}"
    inner: list[ToolCall] = []
    for turn in turns:
        nested = attach_subagents(turn.calls, agent_results, folder, session_id, transcripts, used_ids, scanner,
                                  depth=depth + 1)
        for sub in nested:
            if sub.call_id in used_ids:
                return replace(call, policy=CallPolicy.REFUSED, policy_reason=(
                    f"the sub-agent transcript {shown} reuses the call id {sub.call_id} of another call"))
            used_ids.add(sub.call_id)
            inner.append(replace(sub, subagent=label))
    transcript.records = records
    transcripts[call.call_id] = transcript
    return replace(call, policy=CallPolicy.REUSED, policy_reason=ANSWER_REUSED, subcalls=tuple(inner))
