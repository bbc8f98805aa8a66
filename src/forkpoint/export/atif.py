"""Rows as ATIF v1.8 trajectories, built and validated with the ``atif`` package's models.

System and user messages are steps of their own; an assistant message is an ``agent`` step whose tool calls are
answered by the ``observation`` results of the tool messages that follow it. In the full document the task and
prefix steps carry ``is_copied_context`` (consumers must not train on them); the prefix document holds only those
steps and, when the run continued, names the full one in ``continued_trajectory_ref``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

SCHEMA_VERSION = "ATIF-v1.8"


def trajectories(row: dict[str, Any], name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(file suffix, document) pairs of one row: the full trajectory and its prefix."""
    from atif import Trajectory

    messages = row["messages"]
    live = any(message["segment"] in ("boundary_prompt", "live") for message in messages)
    common = {
        "schema_version": SCHEMA_VERSION,
        "session_id": row["run_id"],
        "agent": {"name": row["agent"],
                  "version": row.get("continuing_version") or row["recorded_version"] or "unknown",
                  "model_name": row.get("model"),
                  "tool_definitions": json.loads(row["tools"]) if row.get("tools") else None},
        "extra": {key: value for key, value in row.items() if key not in ("messages", "tools")},
    }
    full = Trajectory.model_validate({**common, "trajectory_id": name, "steps": _steps(messages, mark_copied=True)})
    prefix_messages = [m for m in messages if m["segment"] in ("task", "prefix")]
    prefix = Trajectory.model_validate({
        **common, "trajectory_id": f"{name}.prefix", "steps": _steps(prefix_messages, mark_copied=False),
        "continued_trajectory_ref": f"{name}.json" if live else None,
    })
    yield "", full.to_json_dict()
    yield ".prefix", prefix.to_json_dict()


def _steps(messages: list[dict[str, Any]], *, mark_copied: bool) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for message in messages:
        role = message["role"]
        copied = mark_copied and message["segment"] in ("task", "prefix")
        extra = {"segment": message["segment"], "trainable": message["trainable"]}
        if role == "tool":
            _observe(steps, message)
            continue
        step: dict[str, Any] = {
            "step_id": len(steps) + 1, "source": "agent" if role == "assistant" else role,
            "message": message.get("content") or "", "extra": extra,
        }
        if copied:
            step["is_copied_context"] = True
        if role == "assistant":
            if message.get("reasoning_content"):
                step["reasoning_content"] = message["reasoning_content"]
            if message.get("tool_calls"):
                step["tool_calls"] = [
                    {"tool_call_id": call["id"], "function_name": call["function"]["name"],
                     "arguments": _arguments(call["function"]["arguments"])}
                    for call in message["tool_calls"]
                ]
        steps.append(step)
    return steps


def _observe(steps: list[dict[str, Any]], message: dict[str, Any]) -> None:
    """Attach a tool message to the agent step that made the call (a result with no such step stands alone)."""
    call_id = message.get("tool_call_id")
    for step in reversed(steps):
        if step["source"] == "agent" and any(c["tool_call_id"] == call_id for c in step.get("tool_calls") or []):
            step.setdefault("observation", {"results": []})["results"].append(
                {"source_call_id": call_id, "content": message.get("content") or ""})
            return
    steps.append({"step_id": len(steps) + 1, "source": "system", "message": "",
                  "observation": {"results": [{"content": message.get("content") or "",
                                               "extra": {"tool_call_id": call_id}}]},
                  "extra": {"segment": message["segment"], "trainable": False}})


def _arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {"input": text}
    return value if isinstance(value, dict) else {"input": value}
