"""Gemini API request -> OpenAI Chat Completions request (Gemini CLI continued on a Chat upstream).

The Gemini API carries the model and the streaming choice in the URL (``/v1beta/models/<model>:<method>``), not
the body: ``with_route`` folds them in as ``model`` and ``stream`` before ``gemini_to_chat`` runs (the pipeline's
route hook, ``ChatTranslation.route``).

What maps: ``systemInstruction`` (text parts, joined by a blank line) -> the first ``system`` message; ``user``
contents -> user messages (text parts kept apart), ``inlineData`` images -> ``image_url`` data URLs;
``model`` contents -> assistant messages (text -> ``content``, ``thought: true`` text -> the reasoning field,
``functionCall`` -> ``tool_calls``, ``args`` as JSON text); ``functionResponse`` -> ``tool`` messages right after
the assistant turn, paired with their call by ``id`` or, without one (Gemini's own history has none), by name in
call order; a response of only ``{"output": text}`` is sent as that text, ``{"error": text}`` as a
``[tool error]`` line, anything else as its JSON. ``functionDeclarations`` (``parametersJsonSchema`` or
``parameters``, whose OpenAPI upper-case types are lower-cased) -> function tools; ``toolConfig``'s calling mode
-> ``tool_choice``; ``generationConfig``'s ``temperature``, ``topP``, ``maxOutputTokens``, ``stopSequences``,
``seed``, ``presencePenalty``, ``frequencyPenalty``, ``responseMimeType: application/json``.

What cannot map is dropped and listed in ``losses``, never silently: ``thoughtSignature``, ``topK``,
``thinkingConfig``, ``safetySettings``, ``labels``, response schemas, built-in tools (``googleSearch``,
``codeExecution``...), non-image inline data and ``fileData`` (a placeholder text says something was there). A
part of an unknown kind, a function response without a call, ``candidateCount`` above 1 or a route that is not a
Gemini model path are refused (``TranslationError``).
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

#: how a failed function response reads on Chat, which has no error flag (the Anthropic translator's mark)
TOOL_ERROR_MARK = "[tool error]\n"
#: the route's facts the hook folds into the body (never Gemini request fields: the gate refuses them)
ROUTE_FIELDS = ("model", "stream")
DROPPED_FIELDS = ("safetySettings", "labels")
HANDLED_FIELDS = frozenset({"model", "stream", "contents", "systemInstruction", "tools", "toolConfig",
                            "generationConfig"})
#: generationConfig fields -> Chat fields (the max-tokens field is the upstream's: ``ChatOptions``)
SAMPLING = {"temperature": "temperature", "topP": "top_p", "seed": "seed", "presencePenalty": "presence_penalty",
            "frequencyPenalty": "frequency_penalty"}
#: how deep a tool schema may nest before it is refused (a hostile schema must not exhaust the stack)
MAX_SCHEMA_DEPTH = 64
PART_KINDS = ("text", "inlineData", "fileData", "functionCall", "functionResponse", "executableCode",
              "codeExecutionResult")

#: the Gemini API's two model methods and its version (they travel in the path, not the body)
STREAM = "streamGenerateContent"
WHOLE = "generateContent"
API_VERSION = "v1beta"


def route_of(path: str) -> tuple[str, str] | None:
    """(model, method) of a ``/v1beta/models/<model>:<method>`` path, else None."""
    head, _, call = path.rstrip("/").rpartition("/models/")
    model, _, method = call.rpartition(":")
    if not head.endswith(API_VERSION) or not model or "/" in model or method not in (STREAM, WHOLE):
        return None
    return model, method


@dataclass
class Turn:
    """The calls of the last model turn: ``pending`` (id, name) not answered yet, ``answered`` id -> (name, the
    tool message's text)."""

    pending: list[tuple[str, str]] = field(default_factory=list)
    answered: dict[str, tuple[str, str]] = field(default_factory=dict)


def with_route(path: str, body: JsonObject) -> JsonObject:
    """The body with the model and the streaming choice of its path (``/v1beta/models/<model>:<method>``)."""
    route = route_of(path.partition("?")[0])
    if route is None:
        raise TranslationError("the request path is not a Gemini model method")
    model, method = route
    return {**body, "model": model, "stream": method == STREAM}


def gemini_to_chat(body: JsonObject, options: ChatOptions = DEFAULT_OPTIONS) -> Translated:
    """The Chat Completions body for a Gemini ``generateContent`` body (with its route folded in), and what was
    lost."""
    losses = Losses()
    out: JsonObject = {"model": text_of(body.get("model"), "model")}
    messages: list[JsonObject] = []
    if body.get("systemInstruction") is not None:
        messages.append({"role": "system", "content": _system(body["systemInstruction"], losses)})
    turn = Turn()
    for number, content in enumerate(object_list(body.get("contents"), "contents")):
        messages.extend(_content(content, number, turn, options, losses))
    if not messages:
        raise TranslationError("contents: nothing to send")
    out["messages"] = strict_system(messages, losses) if options.strict_system else messages
    if body.get("tools") is not None:
        tools = _tools(object_list(body["tools"], "tools"), losses)
        if tools:
            out["tools"] = tools
    if body.get("toolConfig") is not None:
        _tool_config(body["toolConfig"], out, losses)
    if body.get("generationConfig") is not None:
        _generation(body["generationConfig"], out, options, losses)
    finish_request(body, out, DROPPED_FIELDS, HANDLED_FIELDS, losses)
    return Translated(out, losses.listed())


def _parts(content: JsonObject, where: str) -> list[JsonObject]:
    return object_list(content.get("parts"), f"{where}.parts")


def _kind(part: JsonObject, where: str) -> str:
    kinds = [kind for kind in PART_KINDS if kind in part]
    if len(kinds) != 1:
        raise TranslationError(f"{where}: a part must hold exactly one of {list(PART_KINDS)}, it holds {kinds}")
    return kinds[0]


def _extras(part: JsonObject, kind: str, known: set[str], losses: Losses) -> None:
    for key in part:
        if key == "thoughtSignature":
            losses.add("thoughtSignature dropped")
        elif key != kind and key not in known:
            losses.add(f"{kind} part field {key!r} dropped")


def _system(system: Any, losses: Losses) -> str:
    """``systemInstruction``: a Content of text parts (or a bare string, which the API also takes)."""
    if isinstance(system, str):
        return system
    if not isinstance(system, dict):
        raise TranslationError("systemInstruction: expected a content object or a string")
    texts = []
    for number, part in enumerate(_parts(system, "systemInstruction")):
        where = f"systemInstruction.parts[{number}]"
        if _kind(part, where) != "text":
            raise TranslationError(f"{where}: a system instruction part that is not text")
        _extras(part, "text", set(), losses)
        texts.append(text_of(part["text"], where))
    return "\n\n".join(texts)


def _content(content: JsonObject, number: int, turn: Turn, options: ChatOptions,
             losses: Losses) -> list[JsonObject]:
    where = f"contents[{number}]"
    role = content.get("role", "user")
    parts = _parts(content, where)
    if role == "model":
        turn.pending.clear()  # a model turn's calls are answered by the next user turn, never later
        turn.answered.clear()
        return [_model(parts, where, number, turn, options, losses)]
    if role != "user":
        raise TranslationError(f"{where}: unknown role {role!r}")
    return _user(parts, where, turn, options, losses)


def _model(parts: list[JsonObject], where: str, number: int, turn: Turn, options: ChatOptions,
           losses: Losses) -> JsonObject:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[JsonObject] = []
    for index, part in enumerate(parts):
        at = f"{where}.parts[{index}]"
        kind = _kind(part, at)
        if kind == "text":
            _extras(part, kind, {"thought"}, losses)
            (reasoning if part.get("thought") is True else texts).append(text_of(part["text"], at))
        elif kind == "functionCall":
            _extras(part, kind, set(), losses)
            call = part["functionCall"]
            if not isinstance(call, dict):
                raise TranslationError(f"{at}.functionCall: expected an object")
            name = text_of(call.get("name"), f"{at}.functionCall.name")
            given = call.get("id")
            call_id = given if isinstance(given, str) and given else f"call_fp_{number}_{index}"
            args = call.get("args", {})
            if not isinstance(args, dict):
                raise TranslationError(f"{at}.functionCall.args: expected an object")
            for key in call:
                if key not in ("name", "id", "args"):
                    losses.add(f"functionCall field {key!r} dropped")
            calls.append({"id": call_id, "type": "function",
                          "function": {"name": name, "arguments": dumps_arguments(args)}})
            turn.pending.append((call_id, name))
        else:
            raise TranslationError(f"{at}: a model part of kind {kind!r} cannot be translated")
    message: JsonObject = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if reasoning:
        message[options.reasoning_field] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def _user(parts: list[JsonObject], where: str, turn: Turn, options: ChatOptions,
          losses: Losses) -> list[JsonObject]:
    """Function responses first (Chat wants them right after the assistant's calls), then the rest as one user
    message."""
    tools: list[JsonObject] = []
    out: list[JsonObject] = []
    for index, part in enumerate(parts):
        at = f"{where}.parts[{index}]"
        kind = _kind(part, at)
        if kind == "functionResponse":
            if out:
                losses.add("user content before a functionResponse moved after the tool messages")
            _extras(part, kind, set(), losses)
            answer = _response(part["functionResponse"], at, turn, losses)
            if answer is not None:
                tools.append(answer)
        elif kind == "text":
            _extras(part, kind, {"thought"}, losses)
            if part.get("thought") is True:
                losses.add("thought flag of a user part dropped")
            out.append({"type": "text", "text": text_of(part["text"], at)})
        elif kind == "inlineData":
            _extras(part, kind, set(), losses)
            out.append(_inline(part["inlineData"], at, options, losses))
        elif kind == "fileData":
            losses.add("fileData replaced by a placeholder (the Chat server cannot fetch Google files)")
            out.append({"type": "text", "text": "[file omitted: the model server cannot read it]"})
        else:
            raise TranslationError(f"{at}: a user part of kind {kind!r} cannot be translated")
    if not out:
        return tools
    if len(out) == 1 and out[0]["type"] == "text":
        return [*tools, {"role": "user", "content": out[0]["text"]}]
    return [*tools, {"role": "user", "content": out}]


def _response(result: Any, where: str, turn: Turn, losses: Losses) -> JsonObject | None:
    """A ``functionResponse`` as a ``tool`` message answering its call (by id; without an id, the first open call
    of its name); None for an identical repeat of an answered call's response."""
    if not isinstance(result, dict):
        raise TranslationError(f"{where}.functionResponse: expected an object")
    name = text_of(result.get("name"), f"{where}.functionResponse.name")
    wanted = result.get("id")
    match = next((i for i, (call_id, _) in enumerate(turn.pending) if isinstance(wanted, str) and call_id == wanted),
                 None)
    if match is None and not isinstance(wanted, str):
        match = next((i for i, (_, call_name) in enumerate(turn.pending) if call_name == name), None)
    for key in result:
        if key not in ("name", "id", "response"):
            losses.add(f"functionResponse field {key!r} dropped")
    content = _response_text(result.get("response"))
    if match is None:
        repeated = next((call_id for call_id, (call_name, text) in turn.answered.items()
                         if (call_id == wanted or (wanted is None and call_name == name)) and text == content), None)
        if repeated is not None:  # Gemini CLI 0.61.0 sends a resumed call's response twice (measured)
            losses.add("repeated identical functionResponse dropped (Chat answers a call once)")
            return None
        raise TranslationError(f"{where}: a function response of {name!r} answers no call of the model turn "
                               "before it")
    call_id, call_name = turn.pending.pop(match)
    turn.answered[call_id] = (call_name, content)
    return {"role": "tool", "tool_call_id": call_id, "content": content}


def _response_text(response: Any) -> str:
    if isinstance(response, dict) and set(response) == {"output"} and isinstance(response["output"], str):
        return str(response["output"])
    if isinstance(response, dict) and set(response) == {"error"} and isinstance(response["error"], str):
        return TOOL_ERROR_MARK + str(response["error"])
    return json.dumps(response, ensure_ascii=False)


def _inline(blob: Any, where: str, options: ChatOptions, losses: Losses) -> JsonObject:
    if not isinstance(blob, dict):
        raise TranslationError(f"{where}.inlineData: expected an object")
    mime = text_of(blob.get("mimeType"), f"{where}.inlineData.mimeType")
    data = text_of(blob.get("data"), f"{where}.inlineData.data")
    if mime.startswith("image/"):
        return image_part(f"data:{mime};base64,{data}", options, losses)
    if mime == "application/pdf" and options.files:
        return {"type": "file", "file": {"file_data": f"data:{mime};base64,{data}", "filename": "document.pdf"}}
    losses.add(f"inline {mime.split('/')[0]} data replaced by a placeholder")
    return {"type": "text", "text": f"[{mime} data omitted: the model server takes no such input]"}


def _tools(tools: list[JsonObject], losses: Losses) -> list[JsonObject]:
    out: list[JsonObject] = []
    for number, tool in enumerate(tools):
        for key in tool:
            if key != "functionDeclarations":
                losses.add(f"built-in tool {key!r} dropped")
        for index, declaration in enumerate(object_list(tool.get("functionDeclarations", []),
                                                        f"tools[{number}].functionDeclarations")):
            where = f"tools[{number}].functionDeclarations[{index}]"
            function: JsonObject = {"name": text_of(declaration.get("name"), f"{where}.name")}
            if "description" in declaration:
                function["description"] = text_of(declaration["description"], f"{where}.description")
            if "parametersJsonSchema" in declaration:
                function["parameters"] = _schema(declaration["parametersJsonSchema"], f"{where}.parametersJsonSchema",
                                                 lower=False)
            elif "parameters" in declaration:
                function["parameters"] = _schema(declaration["parameters"], f"{where}.parameters", lower=True)
            else:
                function["parameters"] = {"type": "object", "properties": {}}
            for key in declaration:
                if key not in ("name", "description", "parameters", "parametersJsonSchema"):
                    losses.add(f"function declaration field {key!r} dropped")
            out.append({"type": "function", "function": function})
    return out


def _schema(schema: Any, where: str, *, lower: bool) -> JsonObject:
    """A tool's parameters: a JSON Schema object (``parameters`` is Google's OpenAPI subset: ``"OBJECT"`` ->
    ``"object"``). Shared with the source unless a type had to be lower-cased."""
    if not isinstance(schema, dict):
        raise TranslationError(f"{where}: expected an object")
    value = _lowered(schema, 0, where) if lower else schema
    assert isinstance(value, dict)
    return value


def _lowered(node: Any, depth: int, where: str) -> Any:
    if depth > MAX_SCHEMA_DEPTH:
        raise TranslationError(f"{where}: a schema nested deeper than {MAX_SCHEMA_DEPTH}")
    if isinstance(node, list):
        return [_lowered(item, depth + 1, where) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: _lowered(value, depth + 1, where) for key, value in node.items()}
    if isinstance(out.get("type"), str):
        out["type"] = out["type"].lower()
    return out


def _tool_config(config: Any, out: JsonObject, losses: Losses) -> None:
    if not isinstance(config, dict):
        raise TranslationError("toolConfig: expected an object")
    calling = config.get("functionCallingConfig")
    for key in config:
        if key != "functionCallingConfig":
            losses.add(f"toolConfig field {key!r} dropped")
    if calling is None:
        return
    if not isinstance(calling, dict):
        raise TranslationError("toolConfig.functionCallingConfig: expected an object")
    mode = calling.get("mode", "AUTO")
    allowed = calling.get("allowedFunctionNames")
    choice: Any
    if mode in ("AUTO", "MODE_UNSPECIFIED"):
        choice = "auto"
    elif mode == "NONE":
        choice = "none"
    elif mode in ("ANY", "VALIDATED"):
        if mode == "VALIDATED":
            losses.add("function calling mode VALIDATED sent as required")
        names = object_names(allowed)
        choice = {"type": "function", "function": {"name": names[0]}} if len(names) == 1 else "required"
        if len(names) > 1:
            losses.add("allowedFunctionNames beyond one dropped (Chat names one function or any)")
    else:
        raise TranslationError(f"toolConfig.functionCallingConfig.mode: unknown mode {mode!r}")
    if "tools" in out:
        out["tool_choice"] = choice
    elif choice != "none":
        losses.add("tool_choice dropped (no tools left to choose)")


def object_names(value: Any) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise TranslationError("allowedFunctionNames: expected a list")
    return [text_of(name, "allowedFunctionNames") for name in value]


def _generation(config: Any, out: JsonObject, options: ChatOptions, losses: Losses) -> None:
    if not isinstance(config, dict):
        raise TranslationError("generationConfig: expected an object")
    for name, value in config.items():
        if name in SAMPLING:
            out[SAMPLING[name]] = value
        elif name == "maxOutputTokens":
            out[options.max_tokens_field] = value
        elif name == "stopSequences":
            if not isinstance(value, list):
                raise TranslationError("generationConfig.stopSequences: expected a list")
            out["stop"] = [text_of(item, "generationConfig.stopSequences") for item in value]
        elif name == "candidateCount":
            if value != 1:
                raise TranslationError("generationConfig.candidateCount: only one candidate can be translated")
        elif name == "responseMimeType" and value == "application/json":
            out["response_format"] = {"type": "json_object"}
        elif name == "responseMimeType" and value == "text/plain":
            continue
        else:
            losses.add(f"generationConfig field {name!r} dropped")
