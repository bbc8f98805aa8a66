"""Shared shapes of the translators: the result with its losses, the refusal, SSE encoding and small readers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Literal

from forkpoint.core.model import JsonObject

#: the Chat Completions stream's end sentinel (``data: [DONE]``), fed to the stream translators as is
DONE: Final = "[DONE]"
Done = Literal["[DONE]"]


class TranslationError(ValueError):
    """A request or answer that cannot be translated without losing content silently: refused (fail closed)."""


@dataclass(frozen=True)
class Translated:
    """A translated request body and what the translation could not carry over (for the run's metadata).

    ``body`` shares the parts it did not change (tool schemas, long strings) with the source body instead of
    copying them (a 2 MB request stays cheap): treat both as read-only; ``sampling.apply_pins`` copies only the
    objects it sets a pin in."""

    body: JsonObject
    losses: tuple[str, ...]


@dataclass(frozen=True)
class ChatOptions:
    """What the Chat upstream accepts, whichever agent protocol is translated to it: images (``image_url``
    parts), PDFs (``file`` parts, OpenAI only; Anthropic ``document`` blocks), the field carrying reasoning in
    history (``reasoning_content``: vLLM, SGLang, DeepSeek templates), ``reasoning_effort`` (gpt-oss on vLLM reads
    it; some servers refuse unknown fields; from a Responses body's ``reasoning.effort``), the max-tokens field
    name (``max_tokens`` or ``max_completion_tokens``), and ``strict_system`` for chat templates that refuse a
    system message after the first (``strict_system`` below: Codex sends developer messages mid-conversation)."""

    images: bool = True
    files: bool = False
    reasoning_field: str = "reasoning_content"
    reasoning_effort: bool = True
    max_tokens_field: str = "max_tokens"
    strict_system: bool = False


DEFAULT_OPTIONS = ChatOptions()


class Losses:
    """Losses counted by kind, reported once each with their count (a long session repeats the same ones)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def add(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def listed(self) -> tuple[str, ...]:
        return tuple(what if n == 1 else f"{what} (x{n})" for what, n in self.counts.items())



def finish_request(body: JsonObject, out: JsonObject, dropped: tuple[str, ...], handled: frozenset[str],
                   losses: Losses) -> None:
    """How every translated request ends: a stream asks for the usage chunk (the run's token accounting), and
    every agent field without a Chat counterpart is listed as dropped."""
    if body.get("stream") is True:
        out["stream"] = True
        out["stream_options"] = {"include_usage": True}
    for name in body:
        if name in dropped or name not in handled:
            losses.add(f"request field {name!r} dropped")


def json_object(raw: bytes | str, what: str) -> JsonObject:
    """A JSON object read from the upstream (``what`` names it in the refusal); anything else is refused."""
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as error:
        raise TranslationError(f"{what} that is not JSON: {error}") from error
    if not isinstance(value, dict):
        raise TranslationError(f"{what} that is not a JSON object")
    return value


def only_choice(completion: JsonObject) -> tuple[JsonObject, JsonObject]:
    """A whole Chat completion's one choice and its message (every answer translator reads these first); any other
    shape is a TranslationError."""
    choices = completion.get("choices")
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise TranslationError("a completion without exactly one choice")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise TranslationError("a completion choice without a message")
    return choices[0], message


def sse_event(event: str, data: JsonObject) -> bytes:
    """One server-sent event as Anthropic and the Responses API frame it: ``event: X\\ndata: {json}\\n\\n``
    (an empty ``event``: the ``data:`` line alone, as the Gemini API frames its chunks)."""
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


def text_of(value: Any, where: str) -> str:
    """A string field, refused when it is not one (hostile or unknown shapes never pass as empty text)."""
    if not isinstance(value, str):
        raise TranslationError(f"{where}: expected a string, got {type(value).__name__}")
    return value


def object_list(value: Any, where: str) -> list[JsonObject]:
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise TranslationError(f"{where}: expected a list of objects")
    return value


def image_part(url: str, options: ChatOptions, losses: Losses, detail: str | None = None) -> JsonObject:
    """A Chat ``image_url`` part, or a placeholder text (listed) when the upstream takes no images: the model still
    learns that an image was there."""
    if not options.images:
        losses.add("image replaced by a placeholder (upstream takes no images)")
        return {"type": "text", "text": "[image omitted: the model server takes no images]"}
    image: JsonObject = {"url": url}
    if detail is not None:
        image["detail"] = detail
    return {"type": "image_url", "image_url": image}


def dumps_arguments(value: Any) -> str:
    """Tool arguments as Chat carries them: compact JSON text, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


#: how a system message that a strict chat template would refuse reads as a user message
SYSTEM_AS_USER = "<system>\n{}\n</system>"


def strict_system(messages: list[JsonObject], losses: Losses) -> list[JsonObject]:
    """Messages for chat templates that take one system message, first (Qwen, Llama and others refuse a system
    message anywhere else): the leading system messages are joined into one, later ones become user messages
    with the text wrapped in ``<system>`` tags (listed)."""
    leading = 0
    while leading < len(messages) and messages[leading]["role"] == "system":
        leading += 1
    out: list[JsonObject] = []
    if leading:
        texts = [_plain(m["content"]) for m in messages[:leading]]
        out.append({"role": "system", "content": "\n\n".join(texts)})
        if leading > 1:
            losses.add("leading system messages joined into one")
    for message in messages[leading:]:
        if message["role"] == "system":
            losses.add("system message after the conversation began sent as a user message")
            out.append({"role": "user", "content": SYSTEM_AS_USER.format(_plain(message["content"]))})
        else:
            out.append(message)
    return out


def _plain(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content)
