"""Write a Qwen Code session cut after batch N (pure record building + one atomic write).

Measured on 0.24.4 (docs/adapters/qwen-code.md): ``qwen --resume <id>`` loads
``~/.qwen/projects/<sanitised cwd>/chats/<id>.jsonl``, rebuilds the conversation from its ``user``, ``assistant``
and ``tool_result`` records (``system`` records are bookkeeping) and appends the new turns to the same file. The
rebuilt file is every record up to the last ``tool_result`` of batch N, as recorded, except that the results of
batches 1..N are replaced by the fresh ones (historical for the prepared prefix): the ``functionResponse.response``
the model reads and ``toolCallResult.status``; ``toolCallResult.resultDisplay`` (what the terminal drew, never sent
to the model) is dropped.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path

from forkpoint.adapters.qwen_code.parse import QwenNative, dumps, response_of
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import FreshObservation, JsonObject, Plan
from forkpoint.core.results import write_atomic


def prefix_records(plan: Plan, fresh: Mapping[str, FreshObservation] | None) -> list[JsonObject]:
    """The records up to the last one of batch N; with ``fresh``, every prefix result replaced."""
    native: QwenNative = plan.trajectory.native
    records = copy.deepcopy(native.records[: native.batch_end[plan.after_step - 1] + 1])
    if fresh is None:
        return records
    prefix_ids = {call.call_id for call in plan.calls}
    for record in records:
        response = response_of(record) if record.get("type") == "tool_result" else None
        if response is None or response.get("id") not in prefix_ids:
            continue
        observation = fresh[str(response["id"])]
        record["message"]["parts"] = [{"functionResponse": {"id": response["id"], "name": response.get("name"),
                                                            "response": observation.content}}]
        result = record.get("toolCallResult")
        if isinstance(result, dict):
            result.pop("resultDisplay", None)
            result["status"] = "error" if observation.is_error else "success"
    return records


def session_file_name(native: QwenNative) -> str:
    """Qwen Code's own naming: ``<session id>.jsonl`` (the id was checked to be a UUID when parsed)."""
    return f"{native.session_id}.jsonl"


def session_bytes(records: list[JsonObject]) -> bytes:
    return b"".join(dumps(record) + b"\n" for record in records)


def write_session(plan: Plan, fresh: Mapping[str, FreshObservation] | None, destination: Path) -> str:
    data = session_bytes(prefix_records(plan, fresh))
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(destination, data)
    return sha256_hex(data)
