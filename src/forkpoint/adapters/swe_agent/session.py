"""Write SWE-agent ``.traj`` prefixes: the recording cut after step N, with historical or fresh observations.

The prefix keeps ``trajectory`` through step N's entry (requeried attempts included, as recorded) and ``history``
through step N's observation message (system, instance and demonstration messages included), ``replay_config`` and
``environment`` as recorded, and ``info`` without what describes the END of the original run (``exit_status``,
``submission``, ``edited_files*``). In the rebuilt prefix every replayed step gets its fresh ``observation`` /
``state`` / ``execution_time``, its history message the fresh rendered text, and later steps' ``query`` (the exact
model input of that step) the fresh text of the messages it repeats. Written like SWE-agent writes it:
``json.dumps(data, indent=2)``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from forkpoint.adapters.kit.jsondoc import as_object
from forkpoint.adapters.swe_agent.parse import SweAgentNative
from forkpoint.core.errors import trajectory
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import FreshObservation, JsonObject, Plan
from forkpoint.core.results import write_atomic

END_OF_RUN_INFO = ("exit_status", "submission", "edited_files30", "edited_files50", "edited_files70")


def prefix_document(plan: Plan[SweAgentNative], fresh: Mapping[str, FreshObservation] | None) -> JsonObject:
    native = plan.trajectory.native
    # the prepared prefix only slices lists and replaces top-level fields; a rebuilt one also edits records
    data = copy.deepcopy(native.data) if fresh is not None else dict(native.data)
    steps = native.steps[: plan.after_step]
    last = steps[-1]
    if last.observation_at is None:
        raise trajectory(f"SWE-agent step {plan.after_step} has no observation message")
    history: list[JsonObject] = data["history"][: last.observation_at + 1]
    # requeried attempts between accepted steps stay as recorded: SWE-agent keeps them in trajectory only
    trajectory_steps: list[JsonObject] = data["trajectory"][: last.trajectory_at + 1]
    if fresh is not None:
        replaced: list[tuple[int, Any, Any]] = []  # (trajectory index, historical, fresh content) per replayed step
        for batch, step in zip(plan.batches, steps, strict=True):
            call = batch.calls[0]
            observation = fresh.get(call.call_id)
            if observation is None:
                raise trajectory(f"no fresh observation for SWE-agent step {step.index + 1} ({call.call_id})")
            assert step.observation_at is not None
            item = history[step.observation_at]
            replaced.append((step.trajectory_at, item.get("content"), observation.content))
            item["content"] = observation.content
            extra = observation.native if isinstance(observation.native, dict) else {}
            record = trajectory_steps[step.trajectory_at]
            for key in ("observation", "state", "execution_time"):
                if key in extra:
                    record[key] = extra[key]
        for index, record in enumerate(trajectory_steps):
            query = record.get("query")
            if isinstance(query, list):
                earlier = [(old, new) for at, old, new in replaced if at < index]
                record["query"] = [_refresh(message, earlier) for message in query]
    info = as_object(data.get("info"))
    data["info"] = {key: value for key, value in info.items() if key not in END_OF_RUN_INFO}
    data["trajectory"] = trajectory_steps
    data["history"] = history
    return data


def _refresh(message: Any, replaced: list[tuple[Any, Any]]) -> Any:
    """A query message that repeats an earlier step's observation message, with the fresh text."""
    if not isinstance(message, dict) or message.get("role") not in ("user", "tool"):
        return message
    for old, new in replaced:
        if message.get("content") == old:
            return {**message, "content": new}
        if _text(message.get("content")) == _text(old) and isinstance(message.get("content"), list):
            parts = message["content"]
            return {**message, "content": [{**parts[0], "text": _text(new)}, *parts[1:]] if parts else parts}
    return message


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def write_traj(document: JsonObject, destination: Path) -> str:
    payload = json.dumps(document, indent=2).encode("utf-8")
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(destination, payload)
    return sha256_hex(payload)
