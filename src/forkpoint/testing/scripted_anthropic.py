"""ScriptedModel's Anthropic Messages answers (``POST /v1/messages`` and ``/count_tokens``)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from forkpoint.bridge.protocols.anthropic import encode, message_events
from forkpoint.bridge.upstream import SSE_HEADERS, stream_events
from forkpoint.testing.script import Block, ScriptCore, stable_id, text


def assistant_runs(messages: Any) -> int:
    """How many assistant turns a ``messages`` list holds (consecutive assistant messages count once: the API
    merges them)."""
    roles = [m.get("role") for m in messages or [] if isinstance(m, dict)] if isinstance(messages, list) else []
    return sum(1 for i, role in enumerate(roles) if role == "assistant" and (i == 0 or roles[i - 1] != role))


class AnthropicAnswers(ScriptCore):
    def select(self, body: dict[str, Any]) -> tuple[str, int | None]:
        """('main', step) or ('aux', None) for a /v1/messages or /v1/chat/completions body."""
        return self._select(body, lambda: assistant_runs(body.get("messages")))

    def respond(self, kind: str, step: int | None) -> tuple[str, list[Block], str]:
        """(message id, content blocks with ids filled in, stop_reason) for a selected step."""
        if kind == "aux" or step is None:
            return stable_id("msg_", self.seed, "aux", len(self.requests)), [text(self.aux_text)], "end_turn"
        turn = self.turn_at(step)
        if turn is None:
            return stable_id("msg_", self.seed, "final", step), [text(self.final_text)], "end_turn"
        blocks = []
        for index, block in enumerate(turn.content):
            block = dict(block)
            if block.get("type") == "tool_use" and "id" not in block:
                block["id"] = stable_id("toolu_", self.seed, step, index)
            blocks.append(block)
        return stable_id("msg_", self.seed, step), blocks, turn.effective_stop_reason

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        entry = await self._record(request)
        body = entry["body"] if isinstance(entry["body"], dict) else {}
        kind, step = self.select(body)
        msg_id, blocks, stop_reason = self.respond(kind, step)
        fault = self.fault_for(kind, step, entry)
        usage_in = {"input_tokens": 100, "output_tokens": 1, "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0}
        output_tokens = 10 + sum(len(json.dumps(b)) // 4 for b in blocks)
        # ``usage``: what the answer reports in all (the bridge's model_usage is checked against it)
        entry.update(kind=kind, step=step, stop_reason=stop_reason,
                     usage=None if fault is not None else {**usage_in, "output_tokens": output_tokens})
        self._log(entry)
        message = {"id": msg_id, "type": "message", "role": "assistant", "model": body.get("model", self.model),
                   "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage_in}
        if not body.get("stream"):
            message.update(content=blocks, stop_reason=stop_reason,
                           usage={**usage_in, "output_tokens": output_tokens})
            if fault is not None:
                return await fault.answer_json(request, message)
            return web.json_response(message)
        events = encode(message_events(message, blocks, stop_reason, output_tokens))
        if fault is not None:
            return await fault.answer(request, events, SSE_HEADERS["Content-Type"])
        return await stream_events(request, events)

    async def _count_tokens(self, request: web.Request) -> web.Response:
        entry = await self._record(request)
        entry.update(kind="count_tokens")
        self._log(entry)
        return web.json_response({"input_tokens": 1234})
