"""ScriptedModel: a loopback server speaking the Anthropic Messages API, the OpenAI Responses API, OpenAI
Chat Completions and the Gemini API (SSE streaming), driven by a script.

The script is a list of assistant turns; each turn is a list of content blocks (text, thinking, tool_use;
several tool_use blocks = one parallel batch). Which turn answers a request:

* ``step_mode="conversation"`` (default): turn index = number of assistant messages already in the
  request's ``messages`` (a run of consecutive assistant messages counts once). For the Responses API:
  the number of assistant-output groups in ``input`` (a run of consecutive ``function_call`` /
  ``custom_tool_call`` / ``reasoning`` / assistant ``message`` items counts once).
  Robust to resume: a resumed session replays the earlier turns.
* ``step_mode="counter"``: the n-th main request gets turn n.

``keyed`` scripts answer requests whose body contains their key (e.g. a branch's boundary prompt) instead of
``turns``: K branches of one boundary, each prompted differently, get different answers from one server.

A *main* request has a non-empty ``tools`` list (or any request with ``tools_required=False``, for agents that
parse actions from text); others (title/summary helpers) get a short text answer. Past the end of the script the
answer is ``"Done."`` with ``end_turn`` (or, with ``loop_last=True``, the last turn again: a model that never stops).

Endpoints: ``POST /v1/messages`` (+ ``/count_tokens``) for Anthropic clients; ``POST /v1/responses`` (also
``/responses``) for Codex, whose ``base_url = "<url>/v1"`` gets ``/responses`` appended; ``POST /v1/chat/completions``
(also ``/chat/completions``) for OpenCode, Pi and litellm clients (see forkpoint.bridge.protocols.openai_chat for the
block mapping; a turn with ``"stall": true`` sends headers and then nothing: a silent upstream); ``GET /v1/models``
(also ``/models``) answers an empty list; ``POST /v1beta/models/<model>:streamGenerateContent`` (and
``:generateContent``) for Gemini CLI (see forkpoint.testing.scripted_gemini). On the Responses API a block maps
to an output item:
``text`` -> assistant ``message`` (``output_text``); ``tool_use`` -> ``function_call`` (``arguments`` = the
JSON of ``input``, ``call_id`` = the block's ``id`` or a seeded ``call_…``); ``custom_tool_call``
(``{"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch…"}``) -> a freeform
``custom_tool_call``; ``function_call`` (``arguments`` as a raw string, e.g. deliberately invalid JSON) is
passed through; ``thinking`` -> a ``reasoning`` item (summary text, ``encrypted_content`` = signature).

Scripted faults (every protocol; for the bridge's upstream retries): a turn's ``faults`` list fails the first
main requests that turn answers, one fault per request in order, then the turn answers normally (a retried request
is answered by the same turn, so ``[429, 503]`` means "third time lucky"). Helper requests never fail. In
script.json::

    {"turns": [{"content": [...], "faults": [
        {"status": 429, "headers": {"Retry-After": "0"}},  # an error answer (4xx/5xx) with these headers
        {"status": 503},
        {"drop": "before_first_byte"},                       # the connection closed before any answer byte
        {"drop": "after_first_byte"}                         # the answer's first event (or half a JSON answer)
    ]}]}                                                     # sent, then the connection closed

``status`` and ``drop`` exclude each other; ``headers`` goes with ``status``. The request log notes each served
fault (``"fault": "status 429"``, ``"fault": "drop after_first_byte"``). In Python: ``Turn(content,
faults=(Fault(429, (("Retry-After", "0"),)), Fault(drop="before_first_byte")))``.

    with ScriptedModel([[text("hi"), tool_use("Bash", {"command": "ls"})], [text("ok")]]).serve() as url:
        ...  # ANTHROPIC_BASE_URL=url, or Codex base_url = url + "/v1"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from forkpoint.process.loop_thread import LoopThread
from forkpoint.testing.script import (
    Block,
    Fault,
    StepMode,
    Turn,
    custom_tool_call,
    stable_id,
    text,
    thinking,
    tool_use,
)
from forkpoint.testing.scripted_chat import ChatAnswers
from forkpoint.testing.scripted_gemini import GeminiAnswers
from forkpoint.testing.scripted_responses import ResponsesAnswers

__all__ = ["Block", "Fault", "ScriptedModel", "StepMode", "Turn", "custom_tool_call", "main", "stable_id", "text",
           "thinking", "tool_use"]


@dataclass
class ScriptedModel(ChatAnswers, ResponsesAnswers, GeminiAnswers):
    """The scripted model server (every protocol's routes). ``requests`` logs every request (auth headers removed)."""

    def reported_usage(self) -> dict[str, int]:
        """What the answers so far reported, in the bridge's ``model_usage`` terms: ``calls`` (model requests
        answered; a scripted fault answers nothing), ``calls_with_usage`` and the normalised token sums (a bridge
        in front must count the same)."""
        from forkpoint.bridge.translate.usage import total
        from forkpoint.bridge.usage_tap import normalise

        answered = [entry for entry in self.requests if entry.get("kind") in ("main", "aux") and not entry.get("fault")]
        reports = [entry["usage"] for entry in answered if isinstance(entry.get("usage"), dict)]
        return {"calls": len(answered), "calls_with_usage": len(reports),
                **total(normalise(report) for report in reports).as_json()}

    async def _models(self, request: web.Request) -> web.Response:
        entry = await self._record(request)
        entry.update(kind="models")
        self._log(entry)
        return web.json_response({"object": "list", "data": [], "models": []})

    async def _other(self, request: web.Request) -> web.Response:
        entry = await self._record(request)
        entry.update(kind="other")
        self._log(entry)
        ok = request.path in ("/", "/api/hello") and request.method in ("GET", "HEAD")  # connectivity checks
        return web.Response(status=200 if ok else 404, text="ok" if ok else "not found")

    # -- serving ---------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application(client_max_size=256 * 1024 * 1024)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        for prefix in ("/v1", ""):
            app.router.add_post(f"{prefix}/responses", self._responses)
            app.router.add_post(f"{prefix}/chat/completions", self._chat)
            app.router.add_get(f"{prefix}/models", self._models)
        app.router.add_post("/v1beta/models/{call}", self._gemini)
        app.router.add_route("*", "/{tail:.*}", self._other)
        return app

    async def start(self, port: int = 0) -> str:
        """Start on 127.0.0.1 (port 0 = random) and return the base URL."""
        return await self._site.start(self.app(), port)

    async def stop(self) -> None:
        await self._site.stop()

    @contextlib.asynccontextmanager
    async def running(self, port: int = 0) -> AsyncIterator[str]:
        """In-process async use: ``async with model.running() as url``."""
        url = await self.start(port)
        try:
            yield url
        finally:
            await self.stop()

    @contextlib.contextmanager
    def serve(self, port: int = 0) -> Iterator[str]:
        """Sync use: run the server in a background thread with its own event loop; yields the base URL."""
        serving: LoopThread[str] = LoopThread("scripted-model")
        url = serving.start(lambda: self.start(port), self.stop)
        try:
            yield url
        finally:
            serving.stop(10.0)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m forkpoint.testing.scripted_model", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", type=Path, required=True, help='JSON file: {"turns": [{"content": [...]}]}')
    parser.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = random)")
    parser.add_argument("--log", type=Path, default=None, help="append every request as JSONL here")
    parser.add_argument("--seed", default=None, help="seed for generated tool_use/message ids")
    parser.add_argument("--step-mode", choices=["conversation", "counter"], default="conversation")
    parser.add_argument("--loop-last", action="store_true", help="repeat the last turn forever (never stops)")
    parser.add_argument("--no-tools-required", action="store_true",
                        help="treat requests without tools as main requests (agents that parse text actions)")
    args = parser.parse_args(argv)
    kwargs: dict[str, Any] = {"log_path": args.log, "step_mode": args.step_mode, "loop_last": args.loop_last,
                              "tools_required": not args.no_tools_required}
    if args.seed is not None:
        kwargs["seed"] = args.seed
    model = ScriptedModel.from_file(args.script, **kwargs)

    async def run() -> None:
        url = await model.start(args.port)
        print(url, flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await model.stop()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())


if __name__ == "__main__":
    main()
