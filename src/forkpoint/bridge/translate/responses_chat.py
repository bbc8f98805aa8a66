"""OpenAI Responses request -> OpenAI Chat Completions request (Codex continued on a Chat upstream).

What maps: ``instructions`` -> the first ``system`` message; input items in order: ``message`` (developer and
system -> ``system``, user -> ``user``, assistant -> ``assistant``; ``input_text``/``output_text`` parts, images
as ``image_url``), ``function_call`` -> an assistant ``tool_calls`` entry (``call_id`` kept as the id),
``function_call_output`` -> a ``tool`` message, ``custom_tool_call`` (Codex's freeform ``apply_patch``) -> a
call of a function tool taking one string argument ``input`` (and back, see ``responses_answer``),
``custom_tool_call_output`` -> a ``tool`` message, ``reasoning`` summaries (or reasoning text) ->
``reasoning_content`` on the assistant turn they precede, ``local_shell_call`` -> a ``local_shell`` call with the
action as arguments. Consecutive assistant-side items make one assistant message. Tools: ``function`` as is,
``custom`` as a function with one string parameter (the grammar is written into the description: Chat cannot
enforce it); ``tool_choice``; ``parallel_tool_calls``; ``max_output_tokens``; ``reasoning.effort`` ->
``reasoning_effort``; ``text.format`` -> ``response_format``; ``temperature``/``top_p``; ``stream``.

Listed in ``losses``: ``encrypted_content`` of reasoning, item ids, ``web_search_call`` items, hosted tools
(``web_search``, ``local_shell``, ...), ``store``/``include``/``prompt_cache_key``/``text.verbosity`` and other
settings without a Chat field. Unknown item or part types and server-side state (``previous_response_id``) are
refused (``TranslationError``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from forkpoint.bridge.translate.common import (
    DEFAULT_OPTIONS,
    ChatOptions,
    Losses,
    Translated,
    TranslationError,
    dumps_arguments,
    finish_request,
    image_part,
    object_list,
    strict_system,
    text_of,
)
from forkpoint.core.model import JsonObject

#: the one parameter of a custom (freeform) tool presented as a Chat function
CUSTOM_INPUT = "input"
LOCAL_SHELL = "local_shell"
DROPPED_FIELDS = ("store", "include", "prompt_cache_key", "client_metadata", "service_tier", "metadata", "user",
                  "truncation", "safety_identifier", "background", "top_logprobs", "max_tool_calls")
HANDLED_FIELDS = frozenset({"model", "instructions", "input", "tools", "tool_choice", "parallel_tool_calls",
                            "max_output_tokens", "reasoning", "text", "temperature", "top_p", "stream"})
REFUSED_FIELDS = ("previous_response_id", "conversation", "prompt")
OUTPUT_ITEMS = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output"})


@dataclass(frozen=True)
class ResponsesTranslated(Translated):
    """The Chat body, its losses, and the custom tools (their calls go back as ``custom_tool_call`` items)."""

    custom_tools: frozenset[str] = field(default_factory=frozenset)


class _Builder:
    """Chat messages in order; assistant-side items gather into one assistant message until another item."""

    def __init__(self, options: ChatOptions, losses: Losses) -> None:
        self.options = options
        self.losses = losses
        self.messages: list[JsonObject] = []
        self.assistant: JsonObject | None = None
        self.held_media: list[JsonObject] = []

    def flush(self) -> None:
        if self.assistant is not None:
            if self.assistant["content"] is None and "tool_calls" not in self.assistant:
                self.assistant["content"] = ""
            self.messages.append(self.assistant)
            self.assistant = None
        if self.held_media:
            self.messages.append({"role": "user", "content": self.held_media})
            self.held_media = []

    def turn(self) -> JsonObject:
        if self.held_media:
            self.flush()
        if self.assistant is None:
            self.assistant = {"role": "assistant", "content": None}
        return self.assistant

    def text(self, value: str) -> None:
        turn = self.turn()
        if "tool_calls" in turn:  # text after the calls: a new assistant message keeps the order
            self.flush()
            turn = self.turn()
        turn["content"] = (turn["content"] or "") + value

    def reasoning(self, value: str) -> None:
        turn = self.turn()
        if turn["content"] is not None or "tool_calls" in turn:
            self.flush()
            turn = self.turn()
        name = self.options.reasoning_field
        turn[name] = f"{turn[name]}\n\n{value}" if turn.get(name) else value

    def call(self, call_id: str, name: str, arguments: str) -> None:
        self.turn().setdefault("tool_calls", []).append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}})

    def add(self, message: JsonObject) -> None:
        if self.assistant is not None or message["role"] != "tool":
            self.flush()
        self.messages.append(message)


def responses_to_chat(body: JsonObject, options: ChatOptions = DEFAULT_OPTIONS) -> ResponsesTranslated:
    """The Chat Completions body for a Responses body, with what was lost and the custom tool names."""
    for name in REFUSED_FIELDS:
        if body.get(name) is not None:
            raise TranslationError(f"{name!r} needs the server's stored state: it cannot be translated")
    losses = Losses()
    out: JsonObject = {"model": text_of(body.get("model"), "model")}
    tools, custom = _tools(body.get("tools"), losses)
    builder = _Builder(options, losses)
    instructions = body.get("instructions")
    if instructions is not None:
        builder.add({"role": "system", "content": text_of(instructions, "instructions")})
    items = body.get("input", [])
    if isinstance(items, str):
        items = [{"type": "message", "role": "user", "content": items}]
    for number, item in enumerate(object_list(items, "input")):
        _item(item, f"input[{number}]", builder, custom)
    builder.flush()
    out["messages"] = strict_system(builder.messages, losses) if options.strict_system else builder.messages
    if tools:
        out["tools"] = tools
    if "tool_choice" in body and tools:  # Chat refuses a tool_choice without tools
        choice = _tool_choice(body["tool_choice"], losses)
        if choice is not None:
            out["tool_choice"] = choice
    if isinstance(body.get("parallel_tool_calls"), bool) and tools:
        out["parallel_tool_calls"] = body["parallel_tool_calls"]
    if "max_output_tokens" in body and body["max_output_tokens"] is not None:
        out[options.max_tokens_field] = body["max_output_tokens"]
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            out[name] = body[name]
    _reasoning(body.get("reasoning"), out, options, losses)
    _text(body.get("text"), out, losses)
    finish_request(body, out, DROPPED_FIELDS, HANDLED_FIELDS, losses)
    return ResponsesTranslated(out, losses.listed(), frozenset(custom))


def _item(item: JsonObject, where: str, builder: _Builder, custom: set[str]) -> None:
    kind = item.get("type", "message")
    if not isinstance(kind, str):
        raise TranslationError(f"{where}: an item type that is not a string")
    for key in item:
        if key == "internal_chat_message_metadata_passthrough":
            builder.losses.add("item metadata passthrough dropped")
    if kind == "message":
        _message(item, where, builder)
    elif kind == "reasoning":
        texts = [text_of(part.get("text"), f"{where}.summary") for part in object_list(
            item.get("summary") or [], f"{where}.summary")]
        if not texts:  # no summary: the raw reasoning text, when a server returned it
            texts = [text_of(part.get("text"), f"{where}.content") for part in object_list(
                item.get("content") or [], f"{where}.content")]
        if item.get("encrypted_content"):
            builder.losses.add("reasoning encrypted_content dropped")
        if texts:
            builder.reasoning("\n\n".join(texts))
    elif kind == "function_call":
        builder.call(text_of(item.get("call_id"), f"{where}.call_id"), text_of(item.get("name"), f"{where}.name"),
                     text_of(item.get("arguments"), f"{where}.arguments"))
    elif kind == "custom_tool_call":
        name = text_of(item.get("name"), f"{where}.name")
        custom.add(name)
        builder.call(text_of(item.get("call_id"), f"{where}.call_id"), name,
                     dumps_arguments({CUSTOM_INPUT: text_of(item.get("input"), f"{where}.input")}))
    elif kind == "local_shell_call":
        call_id = item.get("call_id") or item.get("id")
        builder.call(text_of(call_id, f"{where}.call_id"), LOCAL_SHELL, dumps_arguments(item.get("action", {})))
    elif kind in OUTPUT_ITEMS:
        call_id = item.get("call_id") or item.get("id")
        text, media = _output(item.get("output", ""), where, builder)
        builder.add({"role": "tool", "tool_call_id": text_of(call_id, f"{where}.call_id"), "content": text})
        if media:
            builder.losses.add("tool output image moved to a user message")
            builder.held_media.extend(media)
    elif kind == "web_search_call":
        builder.losses.add("web_search_call item dropped")
    else:
        raise TranslationError(f"{where}: an input item of type {kind!r} cannot be translated")


def _message(item: JsonObject, where: str, builder: _Builder) -> None:
    role = item.get("role")
    content = item.get("content")
    parts = [{"type": "text", "text": content}] if isinstance(content, str) else [
        _part(part, f"{where}.content[{n}]", builder) for n, part in enumerate(object_list(content, where))]
    if role == "assistant":
        for part in parts:
            if part["type"] != "text":
                raise TranslationError(f"{where}: an assistant message part of type {part['type']!r}")
            builder.text(part["text"])
        return
    if role not in ("user", "developer", "system"):
        raise TranslationError(f"{where}: unknown role {role!r}")
    chat_role = "user" if role == "user" else "system"
    if chat_role == "system" and any(part["type"] != "text" for part in parts):
        raise TranslationError(f"{where}: a {role} message with non-text parts")
    single = len(parts) == 1 and parts[0]["type"] == "text"
    builder.add({"role": chat_role, "content": parts[0]["text"] if single else parts})


def _part(part: JsonObject, where: str, builder: _Builder) -> JsonObject:
    kind = part.get("type")
    if kind in ("input_text", "output_text", "text"):
        if part.get("annotations"):
            builder.losses.add("output_text annotations dropped")
        return {"type": "text", "text": text_of(part.get("text"), where)}
    if kind == "refusal":
        return {"type": "text", "text": text_of(part.get("refusal"), where)}
    if kind == "input_image":
        url = part.get("image_url")
        if not isinstance(url, str):
            raise TranslationError(f"{where}: an input_image without an image_url (file ids need the server)")
        detail = part["detail"] if part.get("detail") in ("low", "high", "auto") else None
        return image_part(url, builder.options, builder.losses, detail)
    if kind == "input_file":
        builder.losses.add("input_file replaced by a placeholder")
        return {"type": "text", "text": f"[file omitted: {part.get('filename') or 'file'}]"}
    raise TranslationError(f"{where}: a content part of type {kind!r} cannot be translated")


def _output(output: Any, where: str, builder: _Builder) -> tuple[str, list[JsonObject]]:
    if isinstance(output, str):
        return output, []
    texts: list[str] = []
    media: list[JsonObject] = []
    for number, part in enumerate(object_list(output, f"{where}.output")):
        translated = _part(part, f"{where}.output[{number}]", builder)
        if translated["type"] == "text":
            texts.append(translated["text"])
        else:
            media.append(translated)
    return "\n".join(texts), media


def custom_tool_function(tool: JsonObject, where: str) -> JsonObject:
    """A freeform tool as a Chat function taking the raw text as its one string argument."""
    description: str = tool["description"] if isinstance(tool.get("description"), str) else ""
    tool_format = tool.get("format")
    if isinstance(tool_format, dict) and tool_format.get("type") == "grammar":
        description += (f"\n\nPass the whole text as the `{CUSTOM_INPUT}` string. It must match this "
                        f"{tool_format.get('syntax', '')} grammar:\n{tool_format.get('definition', '')}")
    else:
        description += f"\n\nPass the whole text as the `{CUSTOM_INPUT}` string."
    return {"name": text_of(tool.get("name"), f"{where}.name"), "description": description.strip(),
            "parameters": {"type": "object", "properties": {CUSTOM_INPUT: {"type": "string"}},
                           "required": [CUSTOM_INPUT], "additionalProperties": False}}


def _tools(tools: Any, losses: Losses) -> tuple[list[JsonObject], set[str]]:
    if tools is None:
        return [], set()
    out: list[JsonObject] = []
    custom: set[str] = set()
    for number, tool in enumerate(object_list(tools, "tools")):
        kind = tool.get("type")
        where = f"tools[{number}]"
        if kind == "function":
            function: JsonObject = {"name": text_of(tool.get("name"), f"{where}.name")}
            if isinstance(tool.get("description"), str):
                function["description"] = tool["description"]
            parameters = tool.get("parameters")
            function["parameters"] = parameters if isinstance(parameters, dict) else {"type": "object",
                                                                                     "properties": {}}
            if isinstance(tool.get("strict"), bool):
                function["strict"] = tool["strict"]
            out.append({"type": "function", "function": function})
        elif kind == "custom":
            out.append({"type": "function", "function": custom_tool_function(tool, where)})
            custom.add(out[-1]["function"]["name"])
            losses.add(f"custom tool {tool.get('name')!r}: its format is described, not enforced")
        else:
            losses.add(f"hosted tool {tool.get('name', kind)!r} ({kind}) dropped")
    return out, custom


def _tool_choice(choice: Any, losses: Losses) -> Any:
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom"):
        return {"type": "function", "function": {"name": text_of(choice.get("name"), "tool_choice.name")}}
    losses.add(f"tool_choice {json.dumps(choice)} dropped (auto)")
    return None


def _reasoning(reasoning: Any, out: JsonObject, options: ChatOptions, losses: Losses) -> None:
    if not isinstance(reasoning, dict):
        return
    for key, value in reasoning.items():
        if key == "effort" and isinstance(value, str) and options.reasoning_effort:
            out["reasoning_effort"] = value
        elif value is not None:
            losses.add(f"reasoning.{key} dropped")


def _text(text: Any, out: JsonObject, losses: Losses) -> None:
    if not isinstance(text, dict):
        return
    for key, value in text.items():
        if key == "format" and isinstance(value, dict) and value.get("type") == "json_schema":
            schema: JsonObject = {"name": value.get("name") or "output", "schema": value.get("schema", {})}
            if isinstance(value.get("strict"), bool):
                schema["strict"] = value["strict"]
            out["response_format"] = {"type": "json_schema", "json_schema": schema}
        elif key == "format" and isinstance(value, dict) and value.get("type") in ("json_object", "text"):
            if value["type"] == "json_object":
                out["response_format"] = {"type": "json_object"}
        elif value is not None:
            losses.add(f"text.{key} dropped")
