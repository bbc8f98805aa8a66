"""Rows as ATIF v1.8 trajectories, built and validated with the ``atif`` package's models.

System and user messages are steps of their own; an assistant message is an ``agent`` step whose tool calls are
answered by the ``observation`` results of the tool messages that follow it. In the full document the task and
prefix steps carry ``is_copied_context`` (consumers must not train on them); the prefix document holds only those
steps and, when the run continued, names the full one in ``continued_trajectory_ref``.

With ``--capture-tokens`` records (``tokens.jsonl``), the live agent steps' ``metrics`` carry ATIF's token fields
(``prompt_token_ids``, ``completion_token_ids``, ``logprobs``; v1.3/v1.4+): the n-th live agent step is the answer
to the n-th step request the bridge recorded. They are filled only when the two counts are equal (an agent that
retried a request, or a record without ids, leaves them empty and ``extra.token_ids`` says why): a wrong pairing
would be worse than none.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

SCHEMA_VERSION = "ATIF-v1.8"


def trajectories(row: dict[str, Any], name: str, prefix_name: str,
                 tokens: list[dict[str, Any]] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """(file suffix, document) pairs of one row: the full trajectory (``<name>.json``) and its prefix
    (``<prefix_name>.prefix.json``, shared by the branches of a run, each naming the prefix in ``extra``);
    ``tokens``: the run's step-request token records, in order (``export.tokens.records``)."""
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
    steps = _steps(messages, mark_copied=True)
    extra = {**common["extra"], "prefix_trajectory": f"{prefix_name}.prefix.json"}
    if tokens:
        extra["token_ids"] = _fill_tokens(steps, tokens)
    full = Trajectory.model_validate({**common, "trajectory_id": name, "steps": steps, "extra": extra})
    prefix_messages = [m for m in messages if m["segment"] in ("task", "prefix")]
    prefix = Trajectory.model_validate({
        **common, "trajectory_id": f"{prefix_name}.prefix", "steps": _steps(prefix_messages, mark_copied=False),
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


def _fill_tokens(steps: list[dict[str, Any]], tokens: list[dict[str, Any]]) -> str:
    """Put each step request's ids into its live agent step's ``metrics``; what was done, for ``extra``."""
    live = [step for step in steps if step["source"] == "agent" and step["extra"]["segment"] == "live"]
    if len(live) != len(tokens):
        return f"not filled: {len(live)} live agent steps, {len(tokens)} captured step requests"
    if any(record.get("status") not in ("ok", "mismatch") for record in tokens):
        return "not filled: a step request's token ids were not captured"
    for step, record in zip(live, tokens, strict=True):
        step["metrics"] = {"prompt_token_ids": record.get("prompt_token_ids"),
                           "completion_token_ids": record.get("completion_token_ids"),
                           "logprobs": record.get("completion_logprobs")}
        if record.get("status") == "mismatch":
            step["extra"]["token_mismatch"] = record.get("problems")
    return "filled: one captured request per live agent step"


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
