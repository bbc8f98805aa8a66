"""Write a Gemini CLI session cut after batch N (pure line building + one atomic write).

Measured on 0.61.0 (docs/adapters/gemini-cli.md): ``gemini --session-file <file>`` imports any chat-recording JSONL
(the header, then message records) and rebuilds the conversation from the messages alone
(``convertSessionToClientHistory``). The rebuilt file is the recorded header, then each message up to the last
message of batch N once, in its final form; the results of batches 1..N are replaced by the fresh ones (historical
for the prepared prefix) in both places the CLI reads them: the call's ``result`` (and ``status``) and the user
record that carries the function response. ``resultDisplay`` (what the terminal UI drew, never sent to the model)
is dropped from a rebuilt call. Everything else is kept as recorded.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path

from forkpoint.adapters.gemini_cli.parse import GeminiNative, dumps
from forkpoint.core.hashing import sha256_hex
from forkpoint.core.model import FreshObservation, JsonObject, Plan
from forkpoint.core.results import write_atomic


def prefix_messages(plan: Plan, fresh: Mapping[str, FreshObservation] | None) -> list[JsonObject]:
    """The messages up to the last one of batch N; with ``fresh``, every prefix result replaced."""
    native: GeminiNative = plan.trajectory.native
    messages = copy.deepcopy(native.messages[: native.batch_end[plan.after_step - 1] + 1])
    if fresh is None:
        return messages
    prefix_ids = {call.call_id for call in plan.calls}
    for message in messages:
        for call in message.get("toolCalls") or []:
            if isinstance(call, dict) and call.get("id") in prefix_ids:
                observation = fresh[str(call["id"])]
                call["result"] = [response_part(call["id"], str(call.get("name")), observation)]
                call["status"] = "error" if observation.is_error else "success"
                call.pop("resultDisplay", None)
        content = message.get("content")
        if message.get("type") != "user" or not isinstance(content, list):
            continue
        for index, part in enumerate(content):
            response = part.get("functionResponse") if isinstance(part, dict) else None
            if isinstance(response, dict) and response.get("id") in prefix_ids:
                content[index] = response_part(str(response["id"]), str(response.get("name")),
                                               fresh[str(response["id"])])
    return messages


def response_part(call_id: str, name: str, observation: FreshObservation) -> JsonObject:
    """A ``functionResponse`` part in Gemini CLI's key order."""
    return {"functionResponse": {"id": call_id, "name": name, "response": observation.content}}


def session_lines(native: GeminiNative, messages: list[JsonObject]) -> list[bytes]:
    return [dumps(native.header), *(dumps(message) for message in messages)]


def session_file_name(native: GeminiNative) -> str:
    """Gemini CLI's own naming: ``session-<start time to the minute>-<first 8 of the id>.jsonl``."""
    stamp = str(native.header.get("startTime", "1970-01-01T00:00"))[:16].replace(":", "-")
    safe = "".join(c for c in stamp if c.isalnum() or c in "-T")
    return f"session-{safe}-{str(native.header['sessionId'])[:8]}.jsonl"


def write_session(plan: Plan, fresh: Mapping[str, FreshObservation] | None, destination: Path) -> str:
    native: GeminiNative = plan.trajectory.native
    data = b"".join(line + b"\n" for line in session_lines(native, prefix_messages(plan, fresh)))
    destination.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(destination, data)
    return sha256_hex(data)
