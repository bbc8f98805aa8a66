"""``--record-tool-schemas``: the tool definitions of a continuation's first validated request, in OpenAI form.

Training and analysis of a run need the tools the agent offered its model, not only the calls it made. The
bridge hands the first validated (pre-upstream) body to :class:`ToolSchemaRecorder` once; only its ``tools``
are read (never message content) and converted with the translators' own tool conversion
(``forkpoint.bridge.translate``): Anthropic ``input_schema`` becomes ``parameters``, a Responses ``function`` is
kept, and a freeform ``custom`` tool (Codex's ``apply_patch``) becomes a function with ONE string parameter
whose description states the grammar. The document is written to ``<output>/tool-schemas.json``
(``forkpoint.export.runs`` reads it into the ``tools`` column).
"""

from __future__ import annotations

from contextlib import suppress
from pathlib import Path
from typing import Any

from forkpoint.bridge.translate.common import TranslationError
from forkpoint.core.model import JsonObject
from forkpoint.core.protocols import load

CAPTURED_FROM = "first validated request"


def openai_tools(body: JsonObject, protocol: str) -> tuple[list[JsonObject], tuple[str, ...]]:
    """The body's tool definitions as OpenAI Chat function tools, and what the conversion dropped or changed
    (each protocol's spec converts its own: ``ProtocolSpec.tool_schemas``).

    Only ``tools`` is given to the translators (a body without messages), so no message content is read.
    """
    tools = body.get("tools")
    if not isinstance(tools, list):
        return [], ()
    return load(protocol).tool_schemas(tools)


def from_anthropic(tools: list[Any]) -> tuple[list[JsonObject], tuple[str, ...]]:
    """Anthropic Messages tools: ``input_schema`` becomes ``parameters``."""
    from forkpoint.bridge.translate.anthropic_chat import anthropic_to_chat

    done = anthropic_to_chat({"model": "-", "messages": [], "tools": tools})
    return _functions(done.body), tuple(done.losses)


def from_responses(tools: list[Any]) -> tuple[list[JsonObject], tuple[str, ...]]:
    """Responses tools: a ``function`` is kept, a freeform ``custom`` tool becomes one string parameter."""
    from forkpoint.bridge.translate.responses_chat import responses_to_chat

    answer = responses_to_chat({"model": "-", "input": [], "tools": tools})
    notes = tuple(f"freeform tool {name!r}: a function with one string parameter (the raw text)"
                  for name in sorted(answer.custom_tools))
    return _functions(answer.body), tuple(loss for loss in answer.losses
                                          if not loss.startswith("custom tool")) + notes


def from_chat(tools: list[Any]) -> tuple[list[JsonObject], tuple[str, ...]]:
    """Chat tools: the function tools are kept, any other type is dropped (and noted)."""
    kept = [tool for tool in tools if isinstance(tool, dict) and tool.get("type") == "function"
            and isinstance(tool.get("function"), dict)]
    dropped = tuple(f"non-function tool {tool.get('type')!r} dropped" for tool in tools
                    if isinstance(tool, dict) and tool not in kept)
    return [{"type": "function", "function": _function(tool["function"])} for tool in kept], dropped


def _functions(chat_body: JsonObject) -> list[JsonObject]:
    return [{"type": "function", "function": _function(tool["function"])} for tool in chat_body.get("tools", [])]


def _function(function: dict[str, Any]) -> JsonObject:
    return {key: function[key] for key in ("name", "description", "parameters") if key in function}


def tool_schemas_document(body: JsonObject, protocol: str) -> JsonObject:
    """The ``tool-schemas.json`` document for one validated request body."""
    tools, notes = openai_tools(body, protocol)
    return {"tools": tools, "source_protocol": protocol, "captured_from": CAPTURED_FROM, "notes": list(notes)}


class ToolSchemaRecorder:
    """A bridge observer: writes the first body it is given (the first validated request) and ignores the rest."""

    def __init__(self, path: Path, protocol: str) -> None:
        self.path = path
        self.protocol = protocol
        self.recorded = False

    def __call__(self, body: JsonObject) -> None:
        if self.recorded:
            return
        self.recorded = True
        try:
            document = tool_schemas_document(body, self.protocol)
        except TranslationError as error:  # a malformed tool list is noted, never a failed run
            document = {"tools": None, "source_protocol": self.protocol, "captured_from": CAPTURED_FROM,
                        "notes": [f"not converted: {error}"]}
        from forkpoint.core.results import write_json

        with suppress(OSError):  # not written: the run's metadata then says tool_schemas_recorded: false
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_json(self.path, document, durable=False)
