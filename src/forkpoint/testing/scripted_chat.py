"""ScriptedModel's OpenAI Chat Completions answers (``POST /v1/chat/completions``: OpenCode, Pi, litellm).

The block mapping and the stream are ``forkpoint.bridge.protocols.openai_chat``'s; a turn with ``"stall": true``
sends headers and then nothing (a silent upstream).
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from forkpoint.bridge.protocols.openai_chat import (
    chat_chunks,
    chat_completion,
    chat_message,
    encode,
    sse_data,
    usage_for,
    wants_usage,
)
from forkpoint.bridge.upstream import SSE_HEADERS, stream_events
from forkpoint.testing.script import stable_id, text
from forkpoint.testing.scripted_anthropic import AnthropicAnswers
from forkpoint.testing.scripted_tokens import TokenAnswer, asked, refusal


class ChatAnswers(AnthropicAnswers):
    """Chat Completions answers (turn selection counts assistant messages as for the Messages API); a request
    asking for token ids gets vLLM's fields (``token_mode``: ``forkpoint.testing.scripted_tokens``)."""

    def respond_chat(self, kind: str, step: int | None) -> tuple[str, dict[str, Any], str, bool]:
        """(completion id, assistant message, finish_reason, stall) for a selected step of Chat Completions."""
        turn = None if kind == "aux" or step is None else self.turn_at(step)
        if turn is None:
            label = ("aux", len(self.requests)) if kind == "aux" or step is None else ("final", step)
            message, finish = chat_message([text(self.aux_text if label[0] == "aux" else self.final_text)], str)
            return stable_id("chatcmpl-", self.seed, *label), message, finish, False
        message, finish = chat_message(list(turn.content),
                                       lambda index: stable_id("call_", self.seed, step, index))
        return stable_id("chatcmpl-", self.seed, step), message, finish, turn.stall

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        entry = await self._record(request)
        body = entry["body"] if isinstance(entry["body"], dict) else {}
        refused = refusal(body, self.token_mode)
        if refused is not None:  # SGLang: no ids on a streamed request (refused before any step is answered)
            entry.update(api="chat", kind="refused", step=None, refused=refused["message"])
            self._log(entry)
            return web.json_response(refused, status=400)
        kind, step = self.select(body)
        completion_id, message, finish, stall = self.respond_chat(kind, step)
        fault = self.fault_for(kind, step, entry)
        reported = fault is None and not stall and (not body.get("stream") or wants_usage(body))
        entry.update(api="chat", kind=kind, step=step, finish_reason=finish, stall=stall,
                     usage=usage_for(message) if reported else None)
        self._log(entry)
        model = body.get("model", self.model)
        tokens = TokenAnswer(body, self.token_mode) if asked(body) and fault is None and not stall else None
        if not body.get("stream") and not stall:
            whole = chat_completion(completion_id, model, message, finish)
            if fault is not None:
                return await fault.answer_json(request, whole)
            if tokens is not None:
                whole = tokens.whole(whole)
                entry.update(usage=whole["usage"], sent_tokens=tokens.sent())
            return web.json_response(whole)
        if fault is not None:
            pieces = [sse_data(chunk) for chunk in chat_chunks(completion_id, model, message, finish,
                                                               wants_usage(body))]
            return await fault.answer(request, pieces, SSE_HEADERS["Content-Type"])
        if stall:
            response = web.StreamResponse(headers=SSE_HEADERS)
            await response.prepare(request)
            await asyncio.sleep(24 * 3600)  # cancelled when the client goes away or the server stops
            return response
        chunks = list(chat_chunks(completion_id, model, message, finish, wants_usage(body)))
        if tokens is not None:  # vLLM's token fields, as asked (forkpoint.testing.scripted_tokens)
            chunks = [tokens.chunk(chunk, index == 0) for index, chunk in enumerate(chunks)]
            entry.update(usage=tokens.usage() if wants_usage(body) else None, sent_tokens=tokens.sent())
        return await stream_events(request, encode(chunks))
