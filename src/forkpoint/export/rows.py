"""One export row per run (pure): the conversation with segments and loss mask, and the run's provenance.

Segments: ``task`` (what precedes the first assistant turn: system prompt, task), ``prefix`` (batches 1..N with
their fresh — or, after prepare-only, historical — observations), ``boundary_prompt`` (the user message
``--boundary-user-prompt`` added), ``live`` (what the continued agent and its tools produced). Only assistant
messages are ever ``trainable``: by default the live ones (``train_on="live"``), or the prefix's, or all.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from forkpoint.export.chat import ChatMessage
from forkpoint.export.redact import Redactor
from forkpoint.export.runs import Run
from forkpoint.run.scoring import GroupStats, reward_of

TRAIN_ON = {"live": ("live",), "prefix": ("prefix",), "all": ("prefix", "live")}


@dataclass(frozen=True)
class ExportOptions:
    train_on: str = "live"
    redact: bool = True


#: group id -> the group's statistics over every exported run of that trajectory and boundary, its original reward
Groups = dict[str, tuple[GroupStats, float | None]]


def build_row(run: Run, options: ExportOptions, redactor: Redactor | None,
              groups: Groups | None = None) -> dict[str, Any]:
    """The row of ``run``, its texts passed through ``redactor`` (None: not redacted here)."""
    prefix = [dict(message) for message in run.prefix.messages]
    notes = list(run.prefix.notes)
    messages = prefix
    if run.continued is not None:
        continued = run.continued.messages
        if _starts_with(continued, prefix):
            messages = [*prefix, *(dict(message) for message in continued[len(prefix):])]
        else:
            notes.append("the continued session does not start with the prefix: live messages left out")
    metadata = run.result.metadata
    prompt = metadata.get("boundary_user_prompt") or {}
    _label(messages, len(prefix), bool(prompt.get("injected")), TRAIN_ON[options.train_on])
    if redactor is not None:
        for message in messages:
            _redact(message, redactor)
    tools = run.tool_schemas or run.prefix.tools
    row = {
        "messages": messages,
        "tools": json.dumps(tools, ensure_ascii=False) if tools else None,
        "tools_source": "recorded" if run.tool_schemas else ("native" if run.prefix.tools else "not_recorded"),
        "prefix_message_count": len(prefix),
        **provenance(run),
        **scoring_columns(run, groups or {}),
        "notes": notes,
        "redacted": options.redact,
        "redaction_count": 0,
    }
    return row


def _starts_with(continued: list[ChatMessage], prefix: list[ChatMessage]) -> bool:
    if len(continued) < len(prefix):
        return False
    for theirs, ours in zip(continued, prefix, strict=False):
        if theirs.get("role") != ours.get("role") or _call_ids(theirs) != _call_ids(ours):
            return False
        if theirs.get("tool_call_id") != ours.get("tool_call_id"):
            return False
    return True


def _call_ids(message: ChatMessage) -> list[str]:
    return [call["id"] for call in message.get("tool_calls") or []]


def _label(messages: list[ChatMessage], prefix_count: int, prompt_injected: bool, trained: tuple[str, ...]) -> None:
    first_assistant = next((i for i, m in enumerate(messages) if m["role"] == "assistant"), len(messages))
    for index, message in enumerate(messages):
        if index < min(first_assistant, prefix_count):
            segment = "task"
        elif index < prefix_count:
            segment = "prefix"
        elif index == prefix_count and prompt_injected and message["role"] == "user":
            segment = "boundary_prompt"
        else:
            segment = "live"
        message["segment"] = segment
        message["trainable"] = message["role"] == "assistant" and segment in trained


def _redact(message: ChatMessage, redactor: Redactor) -> None:
    for key in ("content", "reasoning_content"):
        if isinstance(message.get(key), str):
            message[key] = redactor.text(message[key])
    for call in message.get("tool_calls") or []:
        call["function"] = {**call["function"], "arguments": redactor.text(call["function"]["arguments"])}


def provenance(run: Run) -> dict[str, Any]:
    """Where the row came from, flat: the columns every row has (null where the run did not record it)."""
    result = run.result
    metadata = result.metadata
    agent = result.agent
    metrics = (run.next_action or {}).get("metrics") or {}
    continued = result.phase == "continued"
    model = metadata.get("upstream_model") or metadata.get("requested_model")
    if model is None and run.continued is not None:
        model = run.continued.model
    return {
        "run_id": result.run_id,
        "branch": metadata.get("branch"),
        "agent": agent.name if agent else None,
        "recorded_version": agent.version if agent else None,
        "recorded_version_status": result.recorded_version_status,
        "continuing_version": (metadata.get("continuing_agent_version") or metadata.get("continuing_version")
                               or (agent.version if agent else None)) if continued else None,
        "profile": agent.profile if agent else None,
        "after_step": result.after_step,
        "mode": metadata.get("mode"),
        "phase": result.phase,
        "quality": result.quality,
        "agent_status": result.agent_status,
        "failure_category": result.failure.category if result.failure else None,
        "source_sha256": metadata.get("source_sha256"),
        "upstream": metadata.get("upstream"),
        "model": model,
        "sampling": json.dumps(metadata["sampling"], sort_keys=True) if metadata.get("sampling") else None,
        "bridge_verdict": _bridge_verdict(metadata.get("model_bridge")),
        "observations_exact": run.summary.get("exact_observations"),
        "observations_diverged": run.summary.get("different_observations"),
        "stale_observations_reused": run.summary.get("stale_observations_reused"),
        "next_action_match": metrics.get("same_tool_calls"),
        "forkpoint_version": metadata.get("forkpoint_version"),
    }


def scoring_columns(run: Run, groups: Groups) -> dict[str, Any]:
    """``reward``, ``group_id``, ``advantage`` (r - mean), ``advantage_grpo`` ((r - mean) / std) and
    ``original_reward``: the group is every exported run's scored continuations of the same trajectory and boundary
    (docs/rl.md); null where the run was not scored."""
    scoring = run.result.metadata.get("scoring")
    gid = scoring.get("group_id") if isinstance(scoring, dict) else None
    reward = reward_of(run.result.score)
    stats, original = groups.get(gid, (None, None)) if isinstance(gid, str) else (None, None)
    if original is None and isinstance(scoring, dict):
        original = reward_of({"reward": scoring.get("original_reward")})
    return {"reward": reward, "group_id": gid if isinstance(gid, str) else None,
            "advantage": stats.advantage(reward) if stats else None,
            "advantage_grpo": stats.advantage_grpo(reward) if stats else None, "original_reward": original}


def _bridge_verdict(bridge: Any) -> str:
    if not isinstance(bridge, dict):
        return "not_started"
    if bridge.get("failed") or bridge.get("refused"):
        return "refused"
    return "validated" if bridge.get("validated") else "no_request"
