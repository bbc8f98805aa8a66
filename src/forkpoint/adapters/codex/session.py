"""Write Codex rollout files: the rollout cut right after a boundary batch's last output."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import orjson

from forkpoint.adapters.codex.parse import ATTACHED_040, OUTPUT_TYPES, CodexNative, Line
from forkpoint.core.errors import trajectory
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import FreshObservation, Plan
from forkpoint.core.results import write_atomic, write_source_lines


def prefix_line_indices(native: CodexNative, after_step: int) -> range:
    end = native.batch_end[after_step - 1]
    if end < 0:
        raise trajectory(f"batch {after_step} has no recorded output")
    return range(0, end + 1)


def prefix_lines(plan: Plan[CodexNative]) -> list[Line]:
    """Every line up to and including batch N's last output."""
    native = plan.trajectory.native
    wanted = prefix_line_indices(native, plan.after_step)
    return [line for line in native.lines if line.index in wanted]


def read_prefix(plan: Plan[CodexNative]) -> list[bytes]:
    """The original bytes of the prefix lines, cut from the bytes that were parsed and hashed."""
    native = plan.trajectory.native
    return [native.source[line.offset:line.offset + line.length] for line in prefix_lines(plan)]


def write_prepared(plan: Plan[CodexNative], destination: Path) -> str:
    native = plan.trajectory.native
    destination.parent.mkdir(parents=True, exist_ok=True)
    return write_source_lines(destination, native.source, [(line.offset, line.length) for line in prefix_lines(plan)])


def rebuilt_lines(plan: Plan[CodexNative], fresh: Mapping[str, FreshObservation]) -> tuple[list[bytes], int]:
    """The prefix with each selected call's output replaced by its fresh observation.

    Untouched lines keep their bytes. ``event_msg`` lines that mention a replayed call (Codex's UI-side copies of
    the OLD command output: exec/item-completed events) are dropped, so no stale copy survives; the model never
    sees them. Returns the lines and how many event lines were dropped.
    """
    selected = {call.call_id for call in plan.calls}
    # Codex 0.40's view_image: the output stays the constant, the image message right after it gets the fresh image
    images_040 = {call.call_id for call in plan.calls if call.name == "view_image"
                  and call.historical is not None and isinstance(call.historical.content, list)}
    replaced: set[str] = set()
    out: list[bytes] = []
    dropped = 0
    image_for: str | None = None
    for raw in read_prefix(plan):
        obj = orjson.loads(raw)
        payload = obj.get("payload")
        kind = obj.get("type")
        if image_for is not None:
            if not (kind == "response_item" and isinstance(payload, dict) and payload.get("type") == "message"
                    and payload.get("role") == "user"):
                raise trajectory(f"the image message of Codex 0.40's view_image {image_for} is not where parsed")
            payload["content"] = fresh[image_for].content
            image_for = None
            out.append(orjson.dumps(obj))
            continue
        if kind == "response_item" and isinstance(payload, dict) and payload.get("type") in OUTPUT_TYPES:
            call_id = payload.get("call_id")
            if call_id in selected:
                observation = fresh.get(call_id)
                if observation is None:
                    raise trajectory(f"no fresh observation for selected call {call_id}")
                if call_id in images_040 and payload.get("output") == ATTACHED_040:
                    image_for = call_id
                else:
                    payload["output"] = observation.content
                replaced.add(call_id)
                out.append(orjson.dumps(obj))
                continue
        if kind == "event_msg" and any(call_id.encode() in raw for call_id in selected):
            dropped += 1
            continue
        out.append(raw)
    if image_for is not None:
        raise trajectory(f"the prefix ends before the image message of Codex 0.40's view_image {image_for}")
    missing = selected - replaced
    if missing:
        raise trajectory(f"the rebuilt rollout did not replace every selected output: {sorted(missing)}")
    return out, dropped


def write_rebuilt(plan: Plan[CodexNative], fresh: Mapping[str, FreshObservation], destination: Path) -> str:
    lines, _ = rebuilt_lines(plan, fresh)
    payload = b"".join(line + b"\n" for line in lines)
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(destination, payload)
    return sha256_hex(payload)
