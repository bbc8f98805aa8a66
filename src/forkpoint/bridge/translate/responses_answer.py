"""A Chat Completions answer -> the Responses API events Codex reads, streamed as it arrives.

The event shapes are the ones ScriptedModel's Responses server sends (``forkpoint.testing.scripted_model``),
which real Codex 0.149 and 0.171 accept end to end, plus the fields the ``openai`` package's event types require
(``logprobs`` on text events; ``tool_choice``/``tools``/``parallel_tool_calls`` echoed in the response):
``response.created``, ``response.in_progress``, per output item ``response.output_item.added`` ...
``response.output_item.done``, ``response.completed`` with the output and usage. Every event carries ``type``
and a ``sequence_number`` counting from 0. Items: reasoning (from ``reasoning_content``/``reasoning``) -> a
``reasoning`` item with one summary part (``response.reasoning_summary_*``; ``encrypted_content`` null); text
-> a ``message`` item (``content_part``, ``output_text.delta``/``done``); a tool call -> a ``function_call``
item (``function_call_arguments.delta``/``done``), or for a custom tool (Codex's freeform ``apply_patch``) a
``custom_tool_call`` item whose input is the call's one string argument: its JSON arguments are held until the
call is complete (the raw text inside a JSON string cannot be streamed exactly before the string ends), then
given in one ``custom_tool_call_input.delta``.

``length`` and ``content_filter`` finishes end as ``response.incomplete`` (``incomplete_details.reason``
``max_output_tokens`` / ``content_filter``); a server failure as ``response.failed``.
"""

from __future__ import annotations

import json
from typing import Literal

from forkpoint.bridge.translate.common import DONE, TranslationError, only_choice
from forkpoint.bridge.translate.responses_chat import CUSTOM_INPUT
from forkpoint.bridge.translate.sequencer import BlockSequencer, Event, Kind, ToolCall
from forkpoint.bridge.translate.usage import to_responses
from forkpoint.core.model import JsonObject

INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}


def custom_input(arguments: str, name: str, losses: list[str]) -> str:
    """The raw input of a custom tool call from the Chat function arguments ``{"input": "..."}``; a model that
    sent the raw text instead of JSON gets it passed through (listed)."""
    try:
        value = json.loads(arguments)
    except ValueError:
        value = None
    raw = value.get(CUSTOM_INPUT) if isinstance(value, dict) and len(value) == 1 else None
    if isinstance(raw, str):
        return raw
    losses.append(f"custom tool call {name!r}: arguments were not {{{CUSTOM_INPUT!r}: string}}, passed raw")
    return arguments


def echoed(request: JsonObject) -> JsonObject:
    """The request settings a Responses API response repeats (the OpenAI SDK's ``Response`` requires them)."""
    return {"tool_choice": request.get("tool_choice", "auto"), "tools": request.get("tools", []),
            "parallel_tool_calls": request.get("parallel_tool_calls", True)}


class ChatToResponsesStream(BlockSequencer):
    """One streamed answer's translation: ``feed`` each Chat chunk or ``DONE``, ``end`` when the body ends; each
    returns ``(event name, data)`` pairs (``data`` has ``type`` and ``sequence_number``) for
    ``common.sse_event``. ``custom_tools`` names the tools whose calls go back as ``custom_tool_call``;
    ``request`` (the agent's Responses body) gives the settings the response repeats."""

    def __init__(self, *, response_id: str, model: str, custom_tools: frozenset[str] = frozenset(),
                 created_at: int = 0, request: JsonObject | None = None) -> None:
        super().__init__(id_prefix="call_fp_")
        self.custom_tools = custom_tools
        self.envelope: JsonObject = {"id": response_id, "object": "response", "created_at": created_at,
                                     "status": "in_progress", "model": model, "output": [], "usage": None,
                                     **echoed(request or {})}
        self.output: list[JsonObject] = []
        self._sequence = 0
        self._item: JsonObject = {}
        self._text = ""

    def _event(self, name: str, data: JsonObject) -> Event:
        event = name, {"type": name, "sequence_number": self._sequence, **data}
        self._sequence += 1
        return event

    def _where(self) -> JsonObject:
        return {"item_id": self._item["id"], "output_index": len(self.output)}

    def _added(self, item: JsonObject) -> Event:
        self._item, self._text = item, ""
        return self._event("response.output_item.added", {"output_index": len(self.output), "item": item})

    def _item_id(self, prefix: str) -> str:
        return f"{prefix}_{self.envelope['id']}_{len(self.output)}"

    def begin(self) -> list[Event]:
        return [self._event("response.created", {"response": self.envelope}),
                self._event("response.in_progress", {"response": self.envelope})]

    def open_block(self, kind: Literal["text", "reasoning"]) -> list[Event]:
        if kind == "text":
            item = {"type": "message", "id": self._item_id("msg"), "status": "in_progress", "role": "assistant",
                    "content": []}
            return [self._added(item), self._event("response.content_part.added", {
                **self._where(), "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})]
        reasoning: JsonObject = {"type": "reasoning", "id": self._item_id("rs"), "summary": [],
                                 "encrypted_content": None}
        return [self._added(reasoning), self._event("response.reasoning_summary_part.added", {
            **self._where(), "summary_index": 0, "part": {"type": "summary_text", "text": ""}})]

    def block_delta(self, kind: Literal["text", "reasoning"], text: str) -> list[Event]:
        self._text += text
        if kind == "text":
            return [self._event("response.output_text.delta", {**self._where(), "content_index": 0, "delta": text,
                                                               "logprobs": []})]
        return [self._event("response.reasoning_summary_text.delta", {**self._where(), "summary_index": 0,
                                                                      "delta": text})]

    def open_tool(self, tool: ToolCall) -> list[Event]:
        if tool.name in self.custom_tools:
            item = {"type": "custom_tool_call", "id": self._item_id("ctc"), "status": "in_progress",
                    "name": tool.name, "input": "", "call_id": tool.id}
            return [self._added(item)]
        item = {"type": "function_call", "id": self._item_id("fc"), "status": "in_progress", "name": tool.name,
                "arguments": "", "call_id": tool.id}
        return [self._added(item)] + (self.tool_delta(tool, tool.text) if tool.arguments else [])

    def tool_delta(self, tool: ToolCall, text: str) -> list[Event]:
        if tool.name in self.custom_tools:
            return []  # held until the call is complete (see the module docstring)
        return [self._event("response.function_call_arguments.delta", {**self._where(), "delta": text})]

    def close_block(self, kind: Kind, tool: ToolCall | None) -> list[Event]:
        where = self._where()
        if tool is not None and tool.name in self.custom_tools:
            value = custom_input(tool.text, tool.name, self.losses)
            done = {**self._item, "status": "completed", "input": value}
            events = [self._event("response.custom_tool_call_input.delta", {**where, "delta": value}),
                      self._event("response.custom_tool_call_input.done", {**where, "input": value})]
        elif tool is not None:
            arguments = tool.text or "{}"
            done = {**self._item, "status": "completed", "arguments": arguments}
            events = [self._event("response.function_call_arguments.done", {**where, "arguments": arguments})]
        elif kind == "text":
            part = {"type": "output_text", "text": self._text, "annotations": []}
            done = {**self._item, "status": "completed", "content": [part]}
            events = [self._event("response.output_text.done", {**where, "content_index": 0, "text": self._text,
                                                                "logprobs": []}),
                      self._event("response.content_part.done", {**where, "content_index": 0, "part": part})]
        else:
            part = {"type": "summary_text", "text": self._text}
            done = {**self._item, "summary": [part]}
            events = [self._event("response.reasoning_summary_text.done", {**where, "summary_index": 0,
                                                                           "text": self._text}),
                      self._event("response.reasoning_summary_part.done", {**where, "summary_index": 0,
                                                                           "part": part})]
        events.append(self._event("response.output_item.done", {"output_index": len(self.output), "item": done}))
        self.output.append(done)
        return events

    def complete(self, finish: str) -> list[Event]:
        response = {**self.envelope, "output": self.output, "usage": to_responses(self.usage)}
        if finish in INCOMPLETE and not self.any_tool:
            response.update(status="incomplete", incomplete_details={"reason": INCOMPLETE[finish]})
            return [self._event("response.incomplete", {"response": response})]
        if finish not in ("stop", "tool_calls", "function_call", *INCOMPLETE):
            self.losses.append(f"finish_reason {finish!r} read as completed")
        return [self._event("response.completed", {"response": {**response, "status": "completed"}})]

    def fail(self, message: str) -> list[Event]:
        response = {**self.envelope, "status": "failed", "output": self.output, "usage": to_responses(self.usage),
                    "error": {"code": "server_error", "message": message}}
        return [self._event("response.failed", {"response": response})]


def completion_chunks(completion: JsonObject) -> list[JsonObject]:
    """A whole Chat completion as the chunks a server would have streamed for it (one delta per field)."""
    choice, message = only_choice(completion)
    deltas: list[JsonObject] = [{name: message[name]} for name in ("reasoning_content", "reasoning", "content",
                                                                    "refusal") if message.get(name)]
    calls = message.get("tool_calls") or []
    if not isinstance(calls, list):
        raise TranslationError("message tool_calls: expected a list")
    deltas += [{"tool_calls": [{**call, "index": index}]} for index, call in enumerate(calls)
               if isinstance(call, dict)]
    finish = choice.get("finish_reason") or ("tool_calls" if calls else "stop")
    chunks: list[JsonObject] = [{"choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                                for delta in deltas]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if isinstance(completion.get("usage"), dict):
        chunks.append({"choices": [], "usage": completion["usage"]})
    return chunks


def chat_completion_to_responses(completion: JsonObject, *, response_id: str, model: str,
                                 custom_tools: frozenset[str] = frozenset(),
                                 request: JsonObject | None = None) -> tuple[JsonObject, list[str]]:
    """A whole (non-streamed) Chat completion -> the Responses API response object, with what was lost (the same
    translation as the stream's, so both forms agree)."""
    stream = ChatToResponsesStream(response_id=response_id, model=model, custom_tools=custom_tools,
                                   request=request)
    events = [event for chunk in completion_chunks(completion) for event in stream.feed(chunk)]
    events += stream.feed(DONE)
    name, data = events[-1]
    if name == "response.failed":
        raise TranslationError(str(data["response"]["error"]["message"]))
    response: JsonObject = data["response"]
    return response, stream.losses
