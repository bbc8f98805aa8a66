"""Anthropic Messages request -> OpenAI Chat Completions request (Claude Code continued on a Chat upstream).

What maps: ``system`` (string or text blocks, joined by a blank line) -> the first ``system`` message; a
``system``-role message inside ``messages`` (Claude Code 2.1.332 sends them) -> a ``system`` message in place;
user/assistant text; ``tool_use`` -> ``tool_calls`` (ids kept, ``input`` as JSON text); ``tool_result`` ->
``tool`` messages in the order given, right after the assistant turn (``is_error`` marked in the text: Chat has
no error flag); ``thinking`` -> ``reasoning_content`` (signature dropped); images -> ``image_url`` data URLs when
the upstream takes images; text documents -> text; tool definitions; ``tool_choice``; ``stop_sequences``;
``max_tokens``; ``temperature``/``top_p``; ``stream`` (+ ``stream_options.include_usage``).

What cannot map is dropped and listed in ``losses`` (the run's metadata), never silently: thinking signatures,
``redacted_thinking``, ``cache_control``, ``citations``, ``metadata``, ``thinking``/``context_management``/
``output_config`` settings, ``top_k``, server tools, deferred tools (``defer_loading``), images or PDFs the
upstream cannot take (replaced by a placeholder text so the model knows something was there). A block of an
unknown type is refused (``TranslationError``): a new kind of content must be looked at before it can be carried
or dropped.
"""

from __future__ import annotations

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

#: how a failed tool result reads on Chat, which has no error flag
TOOL_ERROR_MARK = "[tool error]\n"
#: how Claude Code's first system block starts: attribution for Anthropic's API, not an instruction to the model
BILLING_HEADER = "x-anthropic-billing-header:"
#: top-level request fields dropped (reported) because Chat has no counterpart
DROPPED_FIELDS = ("metadata", "thinking", "context_management", "output_config", "top_k", "service_tier",
                  "container", "mcp_servers")
HANDLED_FIELDS = frozenset({"model", "messages", "system", "tools", "tool_choice", "stop_sequences", "max_tokens",
                            "temperature", "top_p", "stream"})


def anthropic_to_chat(body: JsonObject, options: ChatOptions = DEFAULT_OPTIONS) -> Translated:
    """The Chat Completions body for an Anthropic Messages body, with what was lost."""
    losses = Losses()
    out: JsonObject = {"model": text_of(body.get("model"), "model")}
    messages: list[JsonObject] = []
    system = body.get("system")
    if system is not None:
        messages.append({"role": "system", "content": _system_text(system, losses, "system")})
    for number, message in enumerate(object_list(body.get("messages"), "messages")):
        messages.extend(_message(message, f"messages[{number}]", options, losses))
    out["messages"] = strict_system(messages, losses) if options.strict_system else messages
    if "tools" in body:
        tools = _tools(object_list(body["tools"], "tools"), losses)
        if tools:
            out["tools"] = tools
    if "tool_choice" in body:
        choice = _tool_choice(body["tool_choice"], losses)
        if "tools" in out:
            out.update(choice)
        elif choice.get("tool_choice") != "none":  # Chat refuses a tool_choice without tools
            losses.add("tool_choice dropped (no tools left to choose)")
    if "stop_sequences" in body:
        out["stop"] = _stop(body["stop_sequences"])
    if "max_tokens" in body:
        out[options.max_tokens_field] = body["max_tokens"]
    for name in ("temperature", "top_p"):
        if name in body:
            out[name] = body[name]
    finish_request(body, out, DROPPED_FIELDS, HANDLED_FIELDS, losses)
    return Translated(out, losses.listed())


def _stop(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise TranslationError("stop_sequences: expected a list")
    return [text_of(item, "stop_sequences") for item in value]


def _system_text(system: Any, losses: Losses, where: str) -> str:
    if isinstance(system, str):
        return system
    parts = []
    for number, block in enumerate(object_list(system, where)):
        if block.get("type") != "text":
            raise TranslationError(f"{where}[{number}]: a system block of type {block.get('type')!r}")
        _block_extras(block, {"type", "text"}, losses)
        value = text_of(block.get("text"), f"{where}[{number}].text")
        if value.startswith(BILLING_HEADER):
            losses.add("Claude Code's billing header system block dropped")
            continue
        parts.append(value)
    return "\n\n".join(parts)


def _block_extras(block: JsonObject, known: set[str], losses: Losses) -> None:
    for key in block:
        if key == "cache_control":
            losses.add("cache_control dropped")
        elif key == "citations":
            losses.add("text citations dropped")
        elif key not in known:
            losses.add(f"{block.get('type')} block field {key!r} dropped")


def _message(message: JsonObject, where: str, options: ChatOptions, losses: Losses) -> list[JsonObject]:
    role = message.get("role")
    content = message.get("content")
    if role == "system":
        return [{"role": "system", "content": _system_text(content, losses, f"{where}.content")}]
    if role not in ("user", "assistant"):
        raise TranslationError(f"{where}: unknown role {role!r}")
    if isinstance(content, str):
        return [{"role": role, "content": content}]
    blocks = object_list(content, f"{where}.content")
    if role == "assistant":
        return [_assistant(blocks, where, options, losses)]
    return _user(blocks, where, options, losses)


def _assistant(blocks: list[JsonObject], where: str, options: ChatOptions, losses: Losses) -> JsonObject:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[JsonObject] = []
    for number, block in enumerate(blocks):
        at = f"{where}.content[{number}]"
        kind = block.get("type")
        if kind == "text":
            _block_extras(block, {"type", "text"}, losses)
            texts.append(text_of(block.get("text"), at))
        elif kind == "thinking":
            _block_extras(block, {"type", "thinking", "signature"}, losses)
            reasoning.append(text_of(block.get("thinking"), at))
            if block.get("signature"):
                losses.add("thinking signature dropped")
        elif kind == "redacted_thinking":
            losses.add("redacted_thinking block dropped")
        elif kind == "tool_use":
            _block_extras(block, {"type", "id", "name", "input"}, losses)
            calls.append({"id": text_of(block.get("id"), f"{at}.id"), "type": "function",
                          "function": {"name": text_of(block.get("name"), f"{at}.name"),
                                       "arguments": dumps_arguments(block.get("input", {}))}})
        else:
            raise TranslationError(f"{at}: an assistant block of type {kind!r} cannot be translated")
    message: JsonObject = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if reasoning:
        message[options.reasoning_field] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def _user(blocks: list[JsonObject], where: str, options: ChatOptions, losses: Losses) -> list[JsonObject]:
    """Tool results first (Chat wants them right after the assistant's calls), then the rest as one user message;
    images inside tool results follow in that user message (Chat tool messages carry text only)."""
    tools: list[JsonObject] = []
    parts: list[JsonObject] = []
    for number, block in enumerate(blocks):
        at = f"{where}.content[{number}]"
        if block.get("type") == "tool_result":
            if parts:
                losses.add("user content before a tool_result moved after the tool messages")
            _block_extras(block, {"type", "tool_use_id", "content", "is_error"}, losses)
            text, media = _tool_result_content(block.get("content", ""), at, options, losses)
            if block.get("is_error") is True:
                text = TOOL_ERROR_MARK + text
            tools.append({"role": "tool", "tool_call_id": text_of(block.get("tool_use_id"), f"{at}.tool_use_id"),
                          "content": text})
            if media:
                losses.add("tool_result image moved to a user message")
                parts.extend(media)
        else:
            parts.append(_user_part(block, at, options, losses))
    if not parts:
        return tools
    if len(parts) == 1 and parts[0]["type"] == "text":
        return [*tools, {"role": "user", "content": parts[0]["text"]}]
    return [*tools, {"role": "user", "content": parts}]


def _tool_result_content(content: Any, where: str, options: ChatOptions,
                         losses: Losses) -> tuple[str, list[JsonObject]]:
    if isinstance(content, str):
        return content, []
    texts: list[str] = []
    media: list[JsonObject] = []
    for number, block in enumerate(object_list(content, f"{where}.content")):
        part = _user_part(block, f"{where}.content[{number}]", options, losses)
        if part["type"] == "text":
            texts.append(part["text"])
        else:
            media.append(part)
    return "\n".join(texts), media


def _user_part(block: JsonObject, where: str, options: ChatOptions, losses: Losses) -> JsonObject:
    kind = block.get("type")
    if kind == "text":
        _block_extras(block, {"type", "text"}, losses)
        return {"type": "text", "text": text_of(block.get("text"), where)}
    if kind == "image":
        _block_extras(block, {"type", "source"}, losses)
        return image_part(_source_url(block.get("source"), where), options, losses)
    if kind == "document":
        return _document(block, where, options, losses)
    if kind == "tool_reference":  # what Claude Code's tool search returns: the named tool becomes loadable
        losses.add("tool_reference read as text (Chat has no tool search)")
        return {"type": "text", "text": f"[tool reference: {text_of(block.get('tool_name'), where)}]"}
    if kind == "search_result":
        _block_extras(block, {"type", "source", "title", "content"}, losses)
        texts = [text_of(b.get("text"), where) for b in object_list(block.get("content"), where)
                 if b.get("type") == "text"]
        return {"type": "text", "text": "\n".join([f"[search result: {block.get('title')} ({block.get('source')})]",
                                                   *texts])}
    raise TranslationError(f"{where}: a user block of type {kind!r} cannot be translated")


def _source_url(source: Any, where: str) -> str:
    if not isinstance(source, dict):
        raise TranslationError(f"{where}.source: expected an object")
    if source.get("type") == "base64":
        media_type = text_of(source.get("media_type"), f"{where}.source.media_type")
        return f"data:{media_type};base64,{text_of(source.get('data'), f'{where}.source.data')}"
    if source.get("type") == "url":
        return text_of(source.get("url"), f"{where}.source.url")
    raise TranslationError(f"{where}.source: a source of type {source.get('type')!r} cannot be translated")


def _document(block: JsonObject, where: str, options: ChatOptions, losses: Losses) -> JsonObject:
    _block_extras(block, {"type", "source", "title", "context"}, losses)
    source = block.get("source")
    title = block.get("title")
    heading = f"[document: {title}]\n" if isinstance(title, str) and title else ""
    if isinstance(source, dict) and source.get("type") == "text":
        return {"type": "text", "text": heading + text_of(source.get("data"), f"{where}.source.data")}
    if isinstance(source, dict) and source.get("type") == "content":
        texts = [text_of(b.get("text"), f"{where}.source.content") for b in object_list(
            source.get("content"), f"{where}.source.content") if b.get("type") == "text"]
        return {"type": "text", "text": heading + "\n".join(texts)}
    if isinstance(source, dict) and source.get("type") == "base64" and options.files:
        return {"type": "file", "file": {"file_data": _source_url(source, where),
                                         "filename": title if isinstance(title, str) and title else "document"}}
    losses.add("document replaced by a placeholder (upstream takes no files)")
    return {"type": "text", "text": f"{heading}[document omitted: the model server takes no files]"}


def _tools(tools: list[JsonObject], losses: Losses) -> list[JsonObject]:
    out = []
    for number, tool in enumerate(tools):
        kind = tool.get("type")
        if kind not in (None, "custom"):
            losses.add(f"server tool {tool.get('name', kind)!r} ({kind}) dropped")
            continue
        if tool.get("defer_loading") is True:  # not in the model's context until a tool search finds it
            losses.add(f"deferred tool {tool.get('name')!r} dropped (Chat has no tool search)")
            continue
        function: JsonObject = {"name": text_of(tool.get("name"), f"tools[{number}].name")}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise TranslationError(f"tools[{number}].input_schema: expected an object")
        function["parameters"] = schema
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
        for key in tool:
            if key not in ("type", "name", "description", "input_schema", "strict", "defer_loading"):
                losses.add(f"tool field {key!r} dropped")
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any, losses: Losses) -> JsonObject:
    if not isinstance(choice, dict):
        raise TranslationError("tool_choice: expected an object")
    kind = choice.get("type")
    out: JsonObject = {}
    if kind == "auto":
        out["tool_choice"] = "auto"
    elif kind == "any":
        out["tool_choice"] = "required"
    elif kind == "none":
        out["tool_choice"] = "none"
    elif kind == "tool":
        out["tool_choice"] = {"type": "function", "function": {"name": text_of(choice.get("name"), "tool_choice")}}
    else:
        raise TranslationError(f"tool_choice: unknown type {kind!r}")
    if choice.get("disable_parallel_tool_use") is True:
        out["parallel_tool_calls"] = False
    for key in choice:
        if key not in ("type", "name", "disable_parallel_tool_use"):
            losses.add(f"tool_choice field {key!r} dropped")
    return out
