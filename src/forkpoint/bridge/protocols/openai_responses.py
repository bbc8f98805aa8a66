"""The OpenAI Responses API on the bridge (Codex): its pass-through upstream, its stub and its SSE encoding.

The encoding is shared with forkpoint.testing's ScriptedModel: ``response.created``, ``response.in_progress``,
per output item ``response.output_item.added`` / its deltas / ``response.output_item.done``, then
``response.completed``; each event carries ``type`` and ``sequence_number``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from aiohttp import web

from forkpoint.bridge.protocols.openai import OpenAIUpstream, model_of, openai_error_response
from forkpoint.bridge.protocols.spec import ChatTranslation, ProtocolSpec
from forkpoint.bridge.tool_schemas import from_responses
from forkpoint.bridge.translate.sampling import responses_pins
from forkpoint.bridge.upstream import CHUNK, LocalStub, Sent, pieces, sse_event, stream_events
from forkpoint.core.model import JsonObject
from forkpoint.core.protocols import wire

if TYPE_CHECKING:
    from forkpoint.bridge.protocols import Patience
    from forkpoint.bridge.translate.common import ChatOptions, Translated
    from forkpoint.bridge.translate.pipeline import Prepared
    from forkpoint.bridge.translate.sequencer import BlockSequencer

PROTOCOL = "openai-responses"
CREATED = 1767225600
#: a call item's type -> the field streamed in pieces and the event name its deltas and end go under
STREAMED_CALL_FIELDS = {
    "function_call": ("arguments", "response.function_call_arguments"),
    "custom_tool_call": ("input", "response.custom_tool_call_input"),
}


class OpenAIResponsesUpstream(OpenAIUpstream):
    """The OpenAI Responses API (Codex)."""

    name = wire(PROTOCOL).upstream
    endpoint = "/responses"


def message_item(item_id: str, value: str) -> JsonObject:
    """An assistant ``message`` output item of one text."""
    return {"type": "message", "id": item_id, "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": value, "annotations": []}]}


def response_events(envelope: JsonObject, items: list[JsonObject], usage: JsonObject,
                    chunk: int = CHUNK) -> Iterator[tuple[str, JsonObject]]:
    """The Responses API streaming event sequence (without ``type``/``sequence_number``) for one response."""
    yield "response.created", {"response": envelope}
    yield "response.in_progress", {"response": envelope}
    for index, item in enumerate(items):
        kind, item_id = item["type"], item["id"]
        where = {"item_id": item_id, "output_index": index}
        if kind == "message":
            yield "response.output_item.added", {"output_index": index, "item": {**item, "status": "in_progress",
                                                                                 "content": []}}
            part = {"type": "output_text", "text": "", "annotations": []}
            value = item["content"][0]["text"]
            yield "response.content_part.added", {**where, "content_index": 0, "part": part}
            for piece in pieces(value, chunk):
                yield "response.output_text.delta", {**where, "content_index": 0, "delta": piece}
            yield "response.output_text.done", {**where, "content_index": 0, "text": value}
            yield "response.content_part.done", {**where, "content_index": 0, "part": {**part, "text": value}}
        elif kind == "reasoning":
            yield "response.output_item.added", {"output_index": index, "item": {**item, "summary": []}}
            for summary_index, summary in enumerate(item["summary"]):
                part = {"type": "summary_text", "text": ""}
                yield "response.reasoning_summary_part.added", {**where, "summary_index": summary_index, "part": part}
                for piece in pieces(summary["text"], chunk):
                    yield "response.reasoning_summary_text.delta", {**where, "summary_index": summary_index,
                                                                    "delta": piece}
                yield "response.reasoning_summary_text.done", {**where, "summary_index": summary_index,
                                                               "text": summary["text"]}
                yield "response.reasoning_summary_part.done", {**where, "summary_index": summary_index,
                                                               "part": {**part, "text": summary["text"]}}
        elif kind in STREAMED_CALL_FIELDS:
            key, event = STREAMED_CALL_FIELDS[kind]
            yield "response.output_item.added", {"output_index": index, "item": {**item, "status": "in_progress",
                                                                                 key: ""}}
            for piece in pieces(item[key], chunk):
                yield f"{event}.delta", {**where, "delta": piece}
            yield f"{event}.done", {**where, key: item[key]}
        else:
            raise ValueError(f"unsupported output item type {kind!r}")
        yield "response.output_item.done", {"output_index": index, "item": item}
    yield "response.completed", {"response": {**envelope, "status": "completed", "output": items, "usage": usage}}


def encode(events: Iterable[tuple[str, JsonObject]]) -> list[bytes]:
    """The SSE bytes of the events, each with its ``type`` and ``sequence_number``."""
    return [sse_event(event, {"type": event, "sequence_number": number, **data})
            for number, (event, data) in enumerate(events)]


def envelope_of(response_id: str, model: str) -> JsonObject:
    """The ``response`` object as streamed before its output exists."""
    return {"id": response_id, "object": "response", "created_at": CREATED, "status": "in_progress",
            "model": model, "output": [], "usage": None}


class ResponsesStubUpstream(LocalStub):
    """Answers a validated Responses request itself with one short assistant message (SSE when ``stream``)."""

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]:
        self._count += 1
        item = message_item(f"msg_forkpoint_stub_{self._count:04d}", self.text)
        usage: JsonObject = {"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 1,
                             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 1}
        envelope = {**envelope_of(f"resp_forkpoint_stub_{self._count:04d}", model_of(body)), "created_at": 0}
        if body.get("stream") is not True:
            return web.json_response({**envelope, "status": "completed", "output": [item], "usage": usage}), Sent(
                200, False)
        events = response_events(envelope, [item], usage, chunk=max(1, len(self.text)))
        return await stream_events(request, encode(events)), Sent(200, False)


def agent_error(status: int, message: str) -> web.Response:
    """An upstream failure as the OpenAI API reports it (Codex retries rate limits)."""
    return openai_error_response(status, "rate_limit_exceeded" if status == 429 else "server_error", message,
                                 "upstream_error")


# the translators load only for a translating run
def _to_chat(body: JsonObject, options: ChatOptions) -> Translated:
    from forkpoint.bridge.translate.responses_chat import responses_to_chat

    return responses_to_chat(body, options)


def _stream(prepared: Prepared, answer_id: str) -> BlockSequencer:
    from forkpoint.bridge.translate.responses_answer import ChatToResponsesStream

    return ChatToResponsesStream(response_id=answer_id, model=prepared.model, custom_tools=prepared.custom_tools,
                                 request=prepared.agent_body)


def _whole(completion: JsonObject, prepared: Prepared, answer_id: str) -> tuple[JsonObject, list[str]]:
    from forkpoint.bridge.translate.responses_answer import chat_completion_to_responses

    return chat_completion_to_responses(completion, response_id=answer_id, model=prepared.model,
                                        custom_tools=prepared.custom_tools, request=prepared.agent_body)


def _passthrough(url: str, key: str, patience: Patience) -> OpenAIResponsesUpstream:
    return OpenAIResponsesUpstream(url, key, retry=patience.retry, **patience.options())


def _refusal(status: int, message: str) -> web.Response:
    """What OpenAI clients do not retry: an ``invalid_request_error``."""
    return openai_error_response(status, "invalid_request_error", message, "upstream_failed")


SPEC = ProtocolSpec(
    name=PROTOCOL, passthrough=_passthrough, stub=ResponsesStubUpstream, encode=encode, pins=responses_pins,
    tool_schemas=from_responses, error=agent_error, refusal=_refusal,
    sample_request={"model": "gpt-5", "input": [{"type": "message", "role": "user",
                                                 "content": [{"type": "input_text", "text": "hello"}]}]},
    chat=ChatTranslation("openai-chat", _to_chat, _stream, _whole, "resp_forkpoint_"),
)
