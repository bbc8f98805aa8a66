"""ScriptedModel's OpenAI Responses answers (``POST /v1/responses``, Codex)."""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from forkpoint.bridge.protocols.openai_responses import CREATED, encode, message_item, response_events
from forkpoint.bridge.upstream import SSE_HEADERS, stream_events
from forkpoint.testing.script import Block, ScriptCore, stable_id


def _is_assistant_output(item: Any) -> bool:
    """True for a Responses API input item the model produced (an assistant-turn item)."""
    if not isinstance(item, dict):
        return False
    kind = item.get("type", "message")
    if kind in ("function_call", "custom_tool_call", "reasoning", "local_shell_call", "web_search_call"):
        return True
    return kind == "message" and item.get("role") == "assistant"


class ResponsesAnswers(ScriptCore):
    def select_responses(self, body: dict[str, Any]) -> tuple[str, int | None]:
        """('main', step) or ('aux', None) for a /v1/responses body."""
        def turns_so_far() -> int:
            items = body.get("input")
            marks = [_is_assistant_output(item) for item in items] if isinstance(items, list) else []
            return sum(1 for i, mark in enumerate(marks) if mark and (i == 0 or not marks[i - 1]))

        return self._select(body, turns_so_far)

    def respond_responses(self, kind: str, step: int | None) -> tuple[str, list[Block]]:
        """(response id, output items) for a selected step of the Responses API."""
        if kind == "aux" or step is None:
            rid = stable_id("resp_", self.seed, "aux", len(self.requests))
            return rid, [message_item(stable_id("msg_", self.seed, "aux", len(self.requests)), self.aux_text)]
        turn = self.turn_at(step)
        if turn is None:
            return stable_id("resp_", self.seed, "final", step), [
                message_item(stable_id("msg_", self.seed, "final", step), self.final_text)]
        items = []
        for index, block in enumerate(turn.content):
            item_id = stable_id("", self.seed, "item", step, index)
            call_id = block.get("id") or stable_id("call_", self.seed, step, index)
            block_type = block.get("type")
            if block_type == "text":
                items.append(message_item(f"msg_{item_id}", block["text"]))
            elif block_type == "thinking":
                items.append({"type": "reasoning", "id": f"rs_{item_id}",
                              "summary": [{"type": "summary_text", "text": block["thinking"]}],
                              "encrypted_content": block.get("signature") or None})
            elif block_type in ("tool_use", "function_call"):
                arguments = block["arguments"] if block_type == "function_call" else json.dumps(block["input"],
                                                                                           ensure_ascii=False)
                items.append({"type": "function_call", "id": f"fc_{item_id}", "status": "completed",
                              "name": block["name"], "arguments": arguments, "call_id": call_id})
            elif block_type == "custom_tool_call":
                items.append({"type": "custom_tool_call", "id": f"ctc_{item_id}", "status": "completed",
                              "name": block["name"], "input": block["input"], "call_id": call_id})
            else:
                raise ValueError(f"unsupported scripted block type {block_type!r} for the Responses API")
        return stable_id("resp_", self.seed, step), items

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        entry = await self._record(request)
        body = entry["body"] if isinstance(entry["body"], dict) else {}
        kind, step = self.select_responses(body)
        response_id, items = self.respond_responses(kind, step)
        fault = self.fault_for(kind, step, entry)
        output_tokens = 10 + sum(len(json.dumps(item)) // 4 for item in items)
        usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": output_tokens,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 100 + output_tokens}
        entry.update(api="responses", kind=kind, step=step,
                     output_types=[item["type"] for item in items], usage=None if fault is not None else usage)
        self._log(entry)
        envelope = {"id": response_id, "object": "response", "created_at": CREATED, "status": "in_progress",
                    "model": body.get("model", self.model), "output": [], "usage": None}
        if not body.get("stream"):
            whole = {**envelope, "status": "completed", "output": items, "usage": usage}
            if fault is not None:
                return await fault.answer_json(request, whole)
            return web.json_response(whole)
        events = encode(response_events(envelope, items, usage))
        if fault is not None:
            return await fault.answer(request, events, SSE_HEADERS["Content-Type"])
        return await stream_events(request, events)
