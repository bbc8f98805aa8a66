"""OpenAI Chat Completions wire shapes for ScriptedModel (pure): turn selection, the response, its SSE chunks.

Agents reaching a model through ``@ai-sdk/openai-compatible`` (OpenCode), Pi's ``openai-completions`` provider
and litellm (mini-swe-agent, OpenHands) all speak ``POST /v1/chat/completions``. A scripted block maps to:

* ``text`` -> ``message.content`` (several text blocks are joined),
* ``thinking`` -> ``message.reasoning_content`` (what DeepSeek-style servers send and Pi / litellm read),
* ``tool_use`` -> one ``tool_calls`` entry (``id`` = the block's id or a seeded ``call_…``; ``arguments`` = the
  JSON of ``input``); ``function_call`` blocks pass a raw ``arguments`` string through (e.g. invalid JSON).

Streaming follows OpenAI: a role chunk, content / reasoning / tool-call deltas (the first delta of a call carries
``id``, ``type`` and ``name``), a finish chunk, an optional usage chunk (``stream_options.include_usage``), then
``data: [DONE]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

Block = dict[str, Any]
CREATED = 1767225600
CHUNK = 48


def assistant_runs(messages: Any) -> int:
    """How many assistant turns a ``messages`` list holds (consecutive assistant messages count once)."""
    roles = [m.get("role") for m in messages or [] if isinstance(m, dict)] if isinstance(messages, list) else []
    return sum(1 for i, role in enumerate(roles) if role == "assistant" and (i == 0 or roles[i - 1] != role))


def chat_message(blocks: list[Block], call_id: Any) -> tuple[Block, str]:
    """(assistant message, finish_reason) for scripted blocks; ``call_id(index)`` names calls without an id."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[Block] = []
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
    message: Block = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message, "tool_calls" if calls else "stop"


def usage_for(message: Block) -> Block:
    completion = 10 + len(json.dumps(message)) // 4
    return {"prompt_tokens": 100, "completion_tokens": completion, "total_tokens": 100 + completion}


def chat_completion(response_id: str, model: str, message: Block, finish_reason: str) -> Block:
    """The non-streaming ``chat.completion`` object."""
    return {"id": response_id, "object": "chat.completion", "created": CREATED, "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
            "usage": usage_for(message)}


def chat_chunks(response_id: str, model: str, message: Block, finish_reason: str,
                include_usage: bool) -> Iterator[Block]:
    """The ``chat.completion.chunk`` objects of one streamed answer (without the final ``[DONE]``)."""
    def chunk(delta: Block, finish: str | None = None) -> Block:
        return {"id": response_id, "object": "chat.completion.chunk", "created": CREATED, "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

    yield chunk({"role": "assistant", "content": ""})
    for part in _pieces(message.get("reasoning_content") or ""):
        yield chunk({"reasoning_content": part})
    for part in _pieces(message.get("content") or ""):
        yield chunk({"content": part})
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        yield chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                     "function": {"name": function["name"], "arguments": ""}}]})
        for part in _pieces(function["arguments"]):
            yield chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
    yield chunk({}, finish_reason)
    if include_usage:
        yield {"id": response_id, "object": "chat.completion.chunk", "created": CREATED, "model": model,
               "choices": [], "usage": usage_for(message)}


def sse_data(payload: Block | str) -> bytes:
    """One ``data:`` line of the Chat Completions stream (``"[DONE]"`` is sent verbatim)."""
    text = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {text}\n\n".encode()


def _pieces(value: str) -> list[str]:
    return [value[i:i + CHUNK] for i in range(0, len(value), CHUNK)]
