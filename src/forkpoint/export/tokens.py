"""``forkpoint export --format tokens``: one JSONL row per captured model request (``--capture-tokens``), the ids
and logprobs that came out of the model, as RL trainers load them.

Each row: ``run_id``, ``branch``, ``request`` (its index in the run's or branch's ``tokens.jsonl``),
``prompt_token_ids``, ``completion_token_ids``, ``logprobs`` (one per completion id), ``loss_mask`` (aligned with
``completion_token_ids``), ``sampling``, ``finish_reason``, ``status`` (``ok`` or ``mismatch``: the ids disagree
with the answer's own counts, ``problems`` says how), ``auxiliary`` and, when the run's documents hold them,
``reward`` / ``group_id`` / ``advantage`` / ``advantage_grpo`` (``score.reward`` of result.json; a branch's
``score.reward``, ``group.id``, ``group.advantage`` and ``group.advantage_grpo`` of branches.json; else null).

The loss mask: every recorded request was answered during the live continuation (the bridge forwards nothing
else), so each completion id of a step request is the model's own output: 1. A helper request's (``auxiliary``:
title generation, not a step of the conversation) are 0. Prompt ids are context, never trained on: a trainer
concatenating prompt and completion masks the prompt with 0s. A request whose ids were not captured
(``unavailable``, ``refused``, ``too_large``) has no row; the export report counts them by status.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson

from forkpoint.bridge.token_capture import SIDECAR
from forkpoint.export.runs import Run, RunFiles, SkippedRun

KEPT = ("ok", "mismatch")


def sidecar_parts(run: Run) -> tuple[str, ...]:
    """Where a run's (or branch's) ``tokens.jsonl`` is, relative to the run dir: beside its continued session."""
    continued = run.native[1]
    return (*continued[:-2], SIDECAR)


def records(run: Run, max_bytes: int) -> list[dict[str, Any]]:
    """The run's (or branch's) token records, as written (bounded, no link followed; a bad line is skipped; a
    sidecar that cannot be read, e.g. a planted link, is one ``unreadable`` record)."""
    try:
        with RunFiles(run.path, max_bytes) as files:
            data = files.read(*sidecar_parts(run))
    except SkippedRun as skipped:
        return [{"status": "unreadable", "problems": [skipped.reason]}]
    found: list[dict[str, Any]] = []
    for line in (data or b"").splitlines():
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(value, dict):
            found.append(value)
    return found


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def scores(run: Run, branch: int | None, max_bytes: int) -> dict[str, Any]:
    """``reward``, ``group_id``, ``advantage`` and ``advantage_grpo`` of a run or branch, null when absent."""
    found: dict[str, Any] = {"reward": None, "group_id": None, "advantage": None, "advantage_grpo": None}
    with RunFiles(run.path, max_bytes) as files:
        try:
            document = files.json("branches.json" if branch is not None else "result.json")
        except SkippedRun:
            return found
    if branch is not None:
        rows = document.get("branches") if isinstance(document, dict) else None
        document = next((row for row in rows or [] if isinstance(row, dict) and row.get("branch") == branch), None)
    if not isinstance(document, dict):
        return found
    score, group = document.get("score"), document.get("group")
    if isinstance(score, dict):
        found["reward"] = _number(score.get("reward"))
    if isinstance(group, dict):
        found["group_id"] = group.get("id") if isinstance(group.get("id"), str | int) else None
        found["advantage"] = _number(group.get("advantage"))
        found["advantage_grpo"] = _number(group.get("advantage_grpo"))
    return found


def token_rows(run: Run, row: dict[str, Any], counts: Counter[str],
               max_bytes: int) -> Iterator[dict[str, Any]]:
    """The rows of one run (or branch); ``counts`` gets every record's status."""
    branch = row.get("branch")
    scored = scores(run, branch if isinstance(branch, int) else None, max_bytes)
    for record in records(run, max_bytes):
        status = str(record.get("status"))
        counts[status] += 1
        completion = record.get("completion_token_ids")
        if status not in KEPT or not isinstance(completion, list):
            continue
        auxiliary = bool(record.get("auxiliary"))
        yield {"run_id": row["run_id"], "branch": branch, "agent": row.get("agent"),
               "request": record.get("request"), "auxiliary": auxiliary, "status": status,
               "problems": record.get("problems") or [],
               "prompt_token_ids": record.get("prompt_token_ids"), "completion_token_ids": completion,
               "logprobs": record.get("completion_logprobs"),
               "loss_mask": [0 if auxiliary else 1] * len(completion),
               "sampling": record.get("sampling") or {}, "finish_reason": record.get("finish_reason"), **scored}
