"""OpenAI Chat Completions on the bridge (OpenCode, Pi, litellm agents): upstream, stub and wire encoding.

Shared with forkpoint.testing's ScriptedModel and OpenCode's tool host. A scripted or stubbed answer's blocks map to:

* ``text`` -> ``message.content`` (several text blocks are joined),
* ``thinking`` -> ``message.reasoning_content`` (what DeepSeek-style servers send and Pi / litellm read),
* ``tool_use`` -> one ``tool_calls`` entry (``id`` = the block's id or ``call_id(index)``; ``arguments`` = the
  JSON of ``input``); ``function_call`` blocks pass a raw ``arguments`` string through (e.g. invalid JSON).

Streaming follows OpenAI: a role chunk, content / reasoning / tool-call deltas (the first delta of a call carries
``id``, ``type`` and ``name``), a finish chunk, an optional usage chunk (``stream_options.include_usage``), then
``data: [DONE]``. The gate side (projection, comparison, the one chat gate) is ``protocols.chat_gate``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

from aiohttp import web

from forkpoint.bridge.protocols.openai import OpenAIUpstream, model_of
from forkpoint.bridge.upstream import CHUNK, JsonObject, LocalStub, Sent, sse_event, stream_events

PROTOCOL = "openai-chat"
CREATED = 1767225600
ROUTES = frozenset({"/v1/chat/completions", "/chat/completions"})


class OpenAIChatUpstream(OpenAIUpstream):
    """OpenAI Chat Completions (OpenCode's openai-compatible provider, Pi's openai-completions, litellm)."""

    name = "openai-chat"
    endpoint = "/chat/completions"


def chat_message(blocks: list[JsonObject], call_id: Callable[[int], Any]) -> tuple[JsonObject, str]:
    """(assistant message, finish_reason) for scripted blocks; ``call_id(index)`` names calls without an id."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[JsonObject] = []
    for index, block in enumerate(blocks):
        kind = block.get("type")
        if kind == "text":
            texts.append(block["text"])
        elif kind == "thinking":
            reasoning.append(block["thinking"])
        elif kind in ("tool_use", "function_call"):
            arguments = block["arguments"] if kind == "function_call" else json.dumps(block["input"],
                                                                                      ensure_ascii=False)
            calls.append({"id": block.get("id") or call_id(index), "type": "function",
                          "function": {"name": block["name"], "arguments": arguments}})
        else:
            raise ValueError(f"unsupported scripted block type {kind!r} for Chat Completions")
    message: JsonObject = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message, "tool_calls" if calls else "stop"


def usage_for(message: JsonObject) -> JsonObject:
    completion = 10 + len(json.dumps(message)) // 4
    return {"prompt_tokens": 100, "completion_tokens": completion, "total_tokens": 100 + completion}


def chat_completion(response_id: str, model: str, message: JsonObject, finish_reason: str,
                    usage: JsonObject | None = None) -> JsonObject:
    """The non-streaming ``chat.completion`` object."""
    return {"id": response_id, "object": "chat.completion", "created": CREATED, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
            "usage": usage_for(message) if usage is None else usage}


def chat_chunks(response_id: str, model: str, message: JsonObject, finish_reason: str, include_usage: bool,
                usage: JsonObject | None = None, chunk_size: int = CHUNK) -> Iterator[JsonObject]:
    """The ``chat.completion.chunk`` objects of one streamed answer (without the final ``[DONE]``)."""
    def chunk(delta: JsonObject, finish: str | None = None) -> JsonObject:
        return {"id": response_id, "object": "chat.completion.chunk", "created": CREATED, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    def parts(value: str) -> list[str]:
        return [value[i:i + chunk_size] for i in range(0, len(value), chunk_size)]

    yield chunk({"role": "assistant", "content": ""})
    for part in parts(message.get("reasoning_content") or ""):
        yield chunk({"reasoning_content": part})
    for part in parts(message.get("content") or ""):
        yield chunk({"content": part})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": function["name"], "arguments": ""}}]})
        for part in parts(function["arguments"]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
    yield chunk({}, finish_reason)
    if include_usage:
        yield {"id": response_id, "object": "chat.completion.chunk", "created": CREATED, "model": model,
               "choices": [], "usage": usage_for(message) if usage is None else usage}


def sse_data(payload: JsonObject | str) -> bytes:
    """One ``data:`` line of the Chat Completions stream (``"[DONE]"`` is sent verbatim)."""
    return sse_event(None, payload)


def wants_usage(body: JsonObject) -> bool:
    """Whether a streamed answer ends with a usage chunk (``stream_options.include_usage``)."""
    options = body.get("stream_options")
    return isinstance(options, dict) and options.get("include_usage") is True


def encode(chunks: Iterator[JsonObject]) -> list[bytes]:
    """The SSE bytes of a streamed answer, ``[DONE]`` included."""
    return [*(sse_data(chunk) for chunk in chunks), sse_data("[DONE]")]


class ChatStubUpstream(LocalStub):
    """Answers a validated Chat Completions request itself with one short assistant message (SSE when ``stream``)."""

    async def send(self, request: web.Request, body: JsonObject) -> tuple[web.StreamResponse, Sent]:
        self._count += 1
        completion_id = f"chatcmpl-forkpoint-stub-{self._count:04d}"
        usage: JsonObject = {"prompt_tokens": 0, "completion_tokens": 1, "total_tokens": 1}
        message: JsonObject = {"role": "assistant", "content": self.text}
        if body.get("stream") is not True:
            return web.json_response({**chat_completion(completion_id, model_of(body), message, "stop", usage),
                                      "created": 0}), Sent(200, False)
        chunks = chat_chunks(completion_id, model_of(body), message, "stop", wants_usage(body), usage,
                             chunk_size=max(1, len(self.text)))
        return await stream_events(request, encode({**c, "created": 0} for c in chunks)), Sent(200, False)
