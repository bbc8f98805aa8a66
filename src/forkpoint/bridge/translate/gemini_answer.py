"""A Chat Completions answer -> the Gemini API stream Gemini CLI reads, streamed as it arrives.

Each chunk is a whole ``GenerateContentResponse`` (unnamed SSE ``data:`` lines, ``alt=sse``) with one part:
text deltas -> ``{text}``, reasoning deltas -> ``{text, thought: true}``, each as it arrives. A tool call ->
one ``{functionCall: {name, args, id}}`` part once its arguments are complete (Gemini carries ``args`` as an
object, never as JSON text in pieces: the call is held until its block closes). Arguments that are not a JSON
object are sent as ``{"arguments": <the text>}`` (listed: the agent's tool then refuses them, as it would a
malformed call). The last chunk carries ``finishReason`` and ``usageMetadata`` with no parts (Gemini CLI takes the
finish reason from any chunk and skips a chunk without parts as content). A server failure ends the stream with a
Google error object (``{"error": {code, message, status}}``), which Gemini CLI's client throws as an API error.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from forkpoint.bridge.translate.common import TranslationError, only_choice, text_of
from forkpoint.bridge.translate.sequencer import FAILED_FINISH, BlockSequencer, Event, Kind, ToolCall
from forkpoint.bridge.translate.usage import Usage, from_chat
from forkpoint.core.model import JsonObject

FINISH_REASONS = {"stop": "STOP", "tool_calls": "STOP", "function_call": "STOP", "length": "MAX_TOKENS",
                  "content_filter": "SAFETY"}

#: Google's error ``status`` per HTTP status (google.rpc.Code names)
STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                408: "DEADLINE_EXCEEDED", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE",
                504: "DEADLINE_EXCEEDED"}


def google_error_json(status: int, message: str) -> JsonObject:
    """The Google API error shape: ``{"error": {"code", "message", "status"}}``."""
    return {"error": {"code": status, "message": message, "status": STATUS_NAMES.get(status, "UNKNOWN")}}


def response_object(response_id: str, model: str, parts: list[JsonObject], finish: str | None,
                    usage: JsonObject | None) -> JsonObject:
    """One ``GenerateContentResponse`` (a whole answer, or one chunk of a stream)."""
    candidate: JsonObject = {"content": {"role": "model", "parts": parts}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    out: JsonObject = {"candidates": [candidate], "modelVersion": model, "responseId": response_id}
    if usage is not None:
        out["usageMetadata"] = usage
    return out


def finish_reason(finish: str, losses: list[str]) -> str:
    """Gemini's ``finishReason`` for a Chat ``finish_reason`` (Gemini ends a turn with calls with STOP too)."""
    if finish not in FINISH_REASONS:
        losses.append(f"finish_reason {finish!r} read as STOP")
    return FINISH_REASONS.get(finish, "STOP")


def usage_metadata(usage: Usage) -> JsonObject:
    """``usageMetadata`` for a normalised record (``candidatesTokenCount`` excludes the thinking tokens)."""
    out: JsonObject = {"promptTokenCount": usage.input,
                       "candidatesTokenCount": max(usage.output - usage.reasoning, 0),
                       "totalTokenCount": usage.input + usage.output}
    if usage.reasoning:
        out["thoughtsTokenCount"] = usage.reasoning
    if usage.cached:
        out["cachedContentTokenCount"] = usage.cached
    return out


def call_part(call_id: str, name: str, arguments: str, losses: list[str]) -> JsonObject:
    """A ``functionCall`` part for a Chat call's complete argument text."""
    try:
        args: Any = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        args = None
    if not isinstance(args, dict):
        losses.append(f"tool call {name!r} arguments were not a JSON object: sent as an arguments text")
        args = {"arguments": arguments}
    return {"functionCall": {"name": name, "args": args, "id": call_id}}


class ChatToGeminiStream(BlockSequencer):
    """One streamed answer's translation: ``feed`` each Chat chunk or ``DONE``, ``end`` when the body ends; each
    returns ``("", GenerateContentResponse)`` pairs (unnamed events). ``losses`` lists what was lost."""

    def __init__(self, *, response_id: str, model: str) -> None:
        super().__init__(id_prefix="call_fp_")
        self.response_id = response_id
        self.model = model

    def _chunk(self, parts: list[JsonObject], finish: str | None = None,
               usage: JsonObject | None = None) -> Event:
        return "", response_object(self.response_id, self.model, parts, finish, usage)

    def begin(self) -> list[Event]:
        return []

    def open_block(self, kind: Literal["text", "reasoning"]) -> list[Event]:
        return []

    def block_delta(self, kind: Literal["text", "reasoning"], text: str) -> list[Event]:
        return [self._chunk([{"text": text, "thought": True} if kind == "reasoning" else {"text": text}])]

    def open_tool(self, tool: ToolCall) -> list[Event]:
        return []

    def tool_delta(self, tool: ToolCall, text: str) -> list[Event]:
        return []

    def close_block(self, kind: Kind, tool: ToolCall | None) -> list[Event]:
        if tool is None:
            return []
        return [self._chunk([call_part(tool.id, tool.name, tool.text, self.losses)])]

    def complete(self, finish: str) -> list[Event]:
        return [self._chunk([], finish_reason(finish, self.losses), usage_metadata(self.usage))]

    def fail(self, message: str) -> list[Event]:
        return [("", google_error_json(500, message))]


def chat_completion_to_gemini(completion: JsonObject, *, response_id: str,
                              model: str) -> tuple[JsonObject, list[str]]:
    """A whole (non-streamed) Chat completion -> a ``GenerateContentResponse``, with what was lost."""
    losses: list[str] = []
    choice, message = only_choice(completion)
    parts: list[JsonObject] = []
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    if isinstance(reasoning, str) and reasoning:
        parts.append({"text": reasoning, "thought": True})
    for name in ("content", "refusal"):
        if isinstance(message.get(name), str) and message[name]:
            parts.append({"text": message[name]})
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise TranslationError("tool_calls: expected a list")
    for number, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise TranslationError(f"tool_calls[{number}]: expected a function call")
        arguments = text_of(function.get("arguments") or "{}", f"tool_calls[{number}].function.arguments")
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else f"call_fp_{number}"
        parts.append(call_part(str(call_id), text_of(function.get("name"), f"tool_calls[{number}].function.name"),
                               arguments, losses))
    finish = choice.get("finish_reason")
    if isinstance(finish, str) and finish in FAILED_FINISH:
        raise TranslationError(f"the model server ended the answer with finish_reason {finish!r}")
    reason = finish_reason(finish if isinstance(finish, str) else "stop", losses)
    usage = usage_metadata(from_chat(completion.get("usage")))
    return response_object(response_id, model, parts, reason, usage), losses
