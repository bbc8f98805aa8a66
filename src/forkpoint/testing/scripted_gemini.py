"""ScriptedModel's Gemini API answers (``POST /v1beta/models/<model>:streamGenerateContent`` and
``:generateContent``: Gemini CLI).

The block mapping and the stream are ``forkpoint.bridge.protocols.gemini``'s. A turn is chosen like the Messages
API's: by the number of ``model`` content runs already in ``contents`` (consecutive ones count once); a request
without ``tools`` is a helper request. A turn with ``"stall": true`` sends headers and then nothing.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from forkpoint.bridge.protocols.gemini import (
    answer_parts,
    encode,
    google_error_response,
    response_chunks,
    usage_metadata,
)
from forkpoint.bridge.translate.gemini_answer import response_object
from forkpoint.bridge.translate.gemini_chat import STREAM, route_of
from forkpoint.bridge.upstream import SSE_HEADERS, stream_events
from forkpoint.testing.script import ScriptCore, stable_id, text


def model_runs(contents: Any) -> int:
    """How many model turns a ``contents`` list holds (consecutive model contents count once)."""
    roles = [c.get("role") for c in contents if isinstance(c, dict)] if isinstance(contents, list) else []
    return sum(1 for i, role in enumerate(roles) if role == "model" and (i == 0 or roles[i - 1] != role))


class GeminiAnswers(ScriptCore):
    """Gemini ``generateContent`` answers."""

    def respond_gemini(self, kind: str, step: int | None) -> tuple[str, list[dict[str, Any]], bool]:
        """(response id, parts with call ids filled in, stall) for a selected step."""
        turn = None if kind == "aux" or step is None else self.turn_at(step)
        if turn is None:
            label = ("aux", len(self.requests)) if kind == "aux" or step is None else ("final", step)
            answer = self.aux_text if label[0] == "aux" else self.final_text
            return stable_id("gemini-", self.seed, *label), answer_parts([text(answer)]), False
        blocks = [{**block, "id": block.get("id") or stable_id("call_", self.seed, step, index)}
                  if block.get("type") == "tool_use" else dict(block) for index, block in enumerate(turn.content)]
        return stable_id("gemini-", self.seed, step), answer_parts(blocks), turn.stall

    async def _gemini(self, request: web.Request) -> web.StreamResponse:
        entry = await self._record(request)
        route = route_of(request.path)
        if route is None:
            entry.update(kind="other")
            self._log(entry)
            return google_error_response(404, f"no such Gemini method: {request.path}")
        model, method = route
        body = entry["body"] if isinstance(entry["body"], dict) else {}
        kind, step = self._select(body, lambda: model_runs(body.get("contents")))
        response_id, parts, stall = self.respond_gemini(kind, step)
        fault = self.fault_for(kind, step, entry)
        usage = usage_metadata(parts)
        entry.update(api="gemini", kind=kind, step=step, stall=stall, model=model,
                     usage=None if fault is not None or stall else usage)
        self._log(entry)
        if method != STREAM and not stall:
            whole = response_object(response_id, model, parts, "STOP", usage)
            if fault is not None:
                return await fault.answer_json(request, whole)
            return web.json_response(whole)
        events = encode(response_chunks(response_id, model, parts, usage))
        if fault is not None:
            return await fault.answer(request, events, SSE_HEADERS["Content-Type"])
        if stall:
            response = web.StreamResponse(headers=SSE_HEADERS)
            await response.prepare(request)
            await asyncio.sleep(24 * 3600)  # cancelled when the client goes away or the server stops
            return response
        return await stream_events(request, events)
