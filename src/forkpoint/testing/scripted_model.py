"""ScriptedModel: a loopback server speaking the Anthropic Messages API, the OpenAI Responses API and OpenAI
Chat Completions (SSE streaming), driven by a script.

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
(also ``/chat/completions``) for OpenCode, Pi and litellm clients (see forkpoint.testing.chat_completions for the
block mapping; a turn with ``"stall": true`` sends headers and then nothing: a silent upstream); ``GET /v1/models``
(also ``/models``) answers an empty list. On the Responses API a block maps to an output item:
``text`` -> assistant ``message`` (``output_text``); ``tool_use`` -> ``function_call`` (``arguments`` = the
JSON of ``input``, ``call_id`` = the block's ``id`` or a seeded ``call_…``); ``custom_tool_call``
(``{"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch…"}``) -> a freeform
``custom_tool_call``; ``function_call`` (``arguments`` as a raw string, e.g. deliberately invalid JSON) is
passed through; ``thinking`` -> a ``reasoning`` item (summary text, ``encrypted_content`` = signature).

    with ScriptedModel([[text("hi"), tool_use("Bash", {"command": "ls"})], [text("ok")]]).serve() as url:
        ...  # ANTHROPIC_BASE_URL=url, or Codex base_url = url + "/v1"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiohttp import web

from forkpoint.testing.chat_completions import assistant_runs, chat_chunks, chat_completion, chat_message, sse_data

Block = dict[str, Any]
StepMode = Literal["conversation", "counter"]

_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
_SECRET_HEADERS = {"x-api-key", "authorization", "proxy-authorization", "cookie"}
_CHUNK = 48


def text(value: str) -> Block:
    return {"type": "text", "text": value}


def thinking(value: str, signature: str = "c2NyaXB0ZWQtc2lnbmF0dXJl") -> Block:
    return {"type": "thinking", "thinking": value, "signature": signature}


def tool_use(name: str, input: dict[str, Any], id: str | None = None) -> Block:
    block: Block = {"type": "tool_use", "name": name, "input": input}
    if id is not None:
        block["id"] = id
    return block


def custom_tool_call(name: str, input: str, id: str | None = None) -> Block:
    """A freeform tool call (Responses API only), e.g. Codex's ``apply_patch`` with the patch text as input."""
    block: Block = {"type": "custom_tool_call", "name": name, "input": input}
    if id is not None:
        block["id"] = id
    return block


@dataclass(frozen=True)
class Turn:
    """One assistant response. ``stop_reason`` defaults to tool_use when it has tool calls, else end_turn."""

    content: tuple[Block, ...]
    stop_reason: str | None = None
    #: answer with headers and then nothing, forever (an upstream that goes silent; Chat Completions only)
    stall: bool = False

    @property
    def effective_stop_reason(self) -> str:
        if self.stop_reason:
            return self.stop_reason
        return "tool_use" if any(b.get("type") == "tool_use" for b in self.content) else "end_turn"

    @classmethod
    def of(cls, value: Turn | Sequence[Block] | dict[str, Any]) -> Turn:
        if isinstance(value, Turn):
            return value
        if isinstance(value, dict):
            return cls(tuple(value["content"]), value.get("stop_reason"), bool(value.get("stall", False)))
        return cls(tuple(value))


def stable_id(prefix: str, *parts: object, length: int = 24) -> str:
    """``prefix`` + ``length`` alphanumerics derived from ``parts`` (deterministic)."""
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    number = int.from_bytes(digest, "big")
    chars = []
    for _ in range(length):
        number, rem = divmod(number, len(_ALPHABET))
        chars.append(_ALPHABET[rem])
    return prefix + "".join(chars)


@dataclass
class ScriptedModel:
    """The scripted model server. ``requests`` logs every request (auth headers removed)."""

    turns: Sequence[Turn | Sequence[Block] | dict[str, Any]]
    seed: str = "forkpoint"
    step_mode: StepMode = "conversation"
    log_path: Path | None = None
    model: str = "claude-scripted"
    final_text: str = "Done."
    aux_text: str = "Scripted helper answer"
    #: False: a request without ``tools`` is a main request too (agents that parse actions from text)
    tools_required: bool = True
    #: past the end of the script, repeat the last turn (a model that never stops) instead of ``final_text``
    loop_last: bool = False
    requests: list[dict[str, Any]] = field(default_factory=list)
    #: key -> turns: a request whose JSON body contains the key is answered from these turns (first key wins)
    keyed: dict[str, Sequence[Turn | Sequence[Block] | dict[str, Any]]] = field(default_factory=dict)
    _script: list[Turn] = field(init=False, repr=False)
    _scripts: dict[str, list[Turn]] = field(init=False, repr=False)
    _chosen: list[Turn] = field(init=False, repr=False)
    _main_count: int = field(default=0, init=False, repr=False)
    _runner: web.AppRunner | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self._script = [Turn.of(t) for t in self.turns]
        self._scripts = {key: [Turn.of(t) for t in turns] for key, turns in self.keyed.items()}
        self._chosen = self._script

    @classmethod
    def from_file(cls, path: Path, **kwargs: Any) -> ScriptedModel:
        """Load ``{"turns": [{"content": [...], "stop_reason"?: ...}, ...], "seed"?: str}``."""
        data = json.loads(Path(path).read_text("utf-8"))
        kwargs.setdefault("seed", data.get("seed", "forkpoint"))
        return cls(data["turns"], **kwargs)

    # -- answering -------------------------------------------------------------------------------------

    def _select(self, body: dict[str, Any], turns_so_far: Callable[[], int]) -> tuple[str, int | None]:
        # select and respond run back to back (no await between them), so the choice holds for this request
        raw = json.dumps(body, ensure_ascii=False) if self._scripts else ""
        self._chosen = next((script for key, script in self._scripts.items() if key in raw), self._script)
        if self.tools_required and not body.get("tools"):
            return "aux", None
        if self.step_mode == "counter":
            step = self._main_count
            self._main_count += 1
            return "main", step
        return "main", turns_so_far()

    def select(self, body: dict[str, Any]) -> tuple[str, int | None]:
        """('main', step) or ('aux', None) for a /v1/messages or /v1/chat/completions body."""
        # consecutive assistant messages are one response (the API merges them)
        return self._select(body, lambda: assistant_runs(body.get("messages")))

    def turn_at(self, step: int) -> Turn | None:
        """The scripted turn answering ``step``; None past the end (unless ``loop_last``)."""
        script = self._chosen
        if step < len(script):
            return script[step]
        return script[-1] if self.loop_last and script else None

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

    # -- OpenAI Responses API ---------------------------------------------------------------------------

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
            return rid, [_message_item(stable_id("msg_", self.seed, "aux", len(self.requests)), self.aux_text)]
        turn = self.turn_at(step)
        if turn is None:
            return stable_id("resp_", self.seed, "final", step), [
                _message_item(stable_id("msg_", self.seed, "final", step), self.final_text)]
        items = []
        for index, block in enumerate(turn.content):
            item_id = stable_id("", self.seed, "item", step, index)
            call_id = block.get("id") or stable_id("call_", self.seed, step, index)
            block_type = block.get("type")
            if block_type == "text":
                items.append(_message_item(f"msg_{item_id}", block["text"]))
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
        entry.update(api="responses", kind=kind, step=step,
                     output_types=[item["type"] for item in items])
        self._log(entry)
        output_tokens = 10 + sum(len(json.dumps(item)) // 4 for item in items)
        usage = {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": output_tokens,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 100 + output_tokens}
        envelope = {"id": response_id, "object": "response", "created_at": 1767225600, "status": "in_progress",
                    "model": body.get("model", self.model), "output": [], "usage": None}
        if not body.get("stream"):
            return web.json_response({**envelope, "status": "completed", "output": items, "usage": usage})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for number, (event, data) in enumerate(responses_sse_events(envelope, items, usage)):
            payload = {"type": event, "sequence_number": number, **data}
            await response.write(f"event: {event}\ndata: {json.dumps(payload, ensure_ascii=False)}\n\n".encode())
        await response.write_eof()
        return response

    # -- OpenAI Chat Completions ----------------------------------------------------------------------

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
        kind, step = self.select(body)
        completion_id, message, finish, stall = self.respond_chat(kind, step)
        entry.update(api="chat", kind=kind, step=step, finish_reason=finish, stall=stall)
        self._log(entry)
        model = body.get("model", self.model)
        if not body.get("stream") and not stall:
            return web.json_response(chat_completion(completion_id, model, message, finish))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        if stall:
            await asyncio.sleep(24 * 3600)  # cancelled when the client goes away or the server stops
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        for chunk in chat_chunks(completion_id, model, message, finish, include_usage):
            await response.write(sse_data(chunk))
        await response.write(sse_data("[DONE]"))
        await response.write_eof()
        return response

    async def _models(self, request: web.Request) -> web.Response:
        entry = await self._record(request)
        entry.update(kind="models")
        self._log(entry)
        return web.json_response({"object": "list", "data": [], "models": []})

    def _log(self, entry: dict[str, Any]) -> None:
        self.requests.append(entry)
        if self.log_path is not None:
            with self.log_path.open("a", encoding="utf-8") as handle:
                handle.write(json.dumps(entry, ensure_ascii=False) + "\n")

    async def _record(self, request: web.Request) -> dict[str, Any]:
        raw = await request.read()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _SECRET_HEADERS}
        entry = {"seq": len(self.requests) + 1, "method": request.method, "path": request.path_qs,
                 "headers": headers, "body": body}
        return entry

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        entry = await self._record(request)
        body = entry["body"] if isinstance(entry["body"], dict) else {}
        kind, step = self.select(body)
        msg_id, blocks, stop_reason = self.respond(kind, step)
        entry.update(kind=kind, step=step, stop_reason=stop_reason)
        self._log(entry)
        usage_in = {"input_tokens": 100, "output_tokens": 1, "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0}
        output_tokens = 10 + sum(len(json.dumps(b)) // 4 for b in blocks)
        message = {"id": msg_id, "type": "message", "role": "assistant", "model": body.get("model", self.model),
                   "content": [], "stop_reason": None, "stop_sequence": None, "usage": usage_in}
        if not body.get("stream"):
            message.update(content=blocks, stop_reason=stop_reason,
                           usage={**usage_in, "output_tokens": output_tokens})
            return web.json_response(message)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        for event, data in sse_events(message, blocks, stop_reason, output_tokens):
            await response.write(f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode())
        await response.write_eof()
        return response

    async def _count_tokens(self, request: web.Request) -> web.Response:
        entry = await self._record(request)
        entry.update(kind="count_tokens")
        self._log(entry)
        return web.json_response({"input_tokens": 1234})

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
        app.router.add_route("*", "/{tail:.*}", self._other)
        return app

    async def start(self, port: int = 0) -> str:
        """Start on 127.0.0.1 (port 0 = random) and return the base URL."""
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

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
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        result: dict[str, Any] = {}

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                result["url"] = loop.run_until_complete(self.start(port))
            except BaseException as error:  # reported to the caller below
                result["error"] = error
            ready.set()
            if "url" in result:
                loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        thread = threading.Thread(target=run, name="scripted-model", daemon=True)
        thread.start()
        ready.wait()
        if "error" in result:
            thread.join()
            raise result["error"]
        try:
            yield str(result["url"])
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=10)


def sse_events(message: dict[str, Any], blocks: list[Block], stop_reason: str,
               output_tokens: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """The Anthropic streaming event sequence for one message."""
    yield "message_start", {"type": "message_start", "message": message}
    for index, block in enumerate(blocks):
        kind = block["type"]
        if kind == "text":
            start: Block = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": c} for c in _chunks(block["text"])]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": c} for c in _chunks(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block.get("signature", "")})
        elif kind == "tool_use":
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            deltas = [{"type": "input_json_delta", "partial_json": c}
                      for c in _chunks(json.dumps(block["input"], ensure_ascii=False))]
        else:
            raise ValueError(f"unsupported scripted block type {kind!r}")
        yield "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
        for delta in deltas:
            yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield "message_delta", {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                            "usage": {"output_tokens": output_tokens}}
    yield "message_stop", {"type": "message_stop"}


def _is_assistant_output(item: Any) -> bool:
    """True for a Responses API input item the model produced (an assistant-turn item)."""
    if not isinstance(item, dict):
        return False
    kind = item.get("type", "message")
    if kind in ("function_call", "custom_tool_call", "reasoning", "local_shell_call", "web_search_call"):
        return True
    return kind == "message" and item.get("role") == "assistant"


def _message_item(item_id: str, value: str) -> Block:
    return {"type": "message", "id": item_id, "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": value, "annotations": []}]}


def responses_sse_events(envelope: dict[str, Any], items: list[Block],
                         usage: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
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
            for chunk in _chunks(value):
                yield "response.output_text.delta", {**where, "content_index": 0, "delta": chunk}
            yield "response.output_text.done", {**where, "content_index": 0, "text": value}
            yield "response.content_part.done", {**where, "content_index": 0, "part": {**part, "text": value}}
        elif kind == "reasoning":
            yield "response.output_item.added", {"output_index": index, "item": {**item, "summary": []}}
            for summary_index, summary in enumerate(item["summary"]):
                part = {"type": "summary_text", "text": ""}
                yield "response.reasoning_summary_part.added", {**where, "summary_index": summary_index, "part": part}
                for chunk in _chunks(summary["text"]):
                    yield "response.reasoning_summary_text.delta", {**where, "summary_index": summary_index,
                                                                    "delta": chunk}
                yield "response.reasoning_summary_text.done", {**where, "summary_index": summary_index,
                                                               "text": summary["text"]}
                yield "response.reasoning_summary_part.done", {**where, "summary_index": summary_index,
                                                               "part": {**part, "text": summary["text"]}}
        elif kind == "function_call":
            yield "response.output_item.added", {"output_index": index, "item": {**item, "status": "in_progress",
                                                                                 "arguments": ""}}
            for chunk in _chunks(item["arguments"]):
                yield "response.function_call_arguments.delta", {**where, "delta": chunk}
            yield "response.function_call_arguments.done", {**where, "arguments": item["arguments"]}
        elif kind == "custom_tool_call":
            yield "response.output_item.added", {"output_index": index, "item": {**item, "status": "in_progress",
                                                                                 "input": ""}}
            for chunk in _chunks(item["input"]):
                yield "response.custom_tool_call_input.delta", {**where, "delta": chunk}
            yield "response.custom_tool_call_input.done", {**where, "input": item["input"]}
        else:
            raise ValueError(f"unsupported output item type {kind!r}")
        yield "response.output_item.done", {"output_index": index, "item": item}
    yield "response.completed", {"response": {**envelope, "status": "completed", "output": items, "usage": usage}}


def _chunks(value: str) -> list[str]:
    return [value[i:i + _CHUNK] for i in range(0, len(value), _CHUNK)] or [""]


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
