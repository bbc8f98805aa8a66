"""What a pass-through answer used, read from its bytes as they pass to the agent: never buffered, bounded.

A pass-through upstream relays the answer chunk by chunk; the relay also hands each chunk to ``UsageTap.feed``.
The tap looks for JSON members named ``usage`` whose value is an object, in any split of the stream. That covers
every place the protocols report tokens: Anthropic's ``message_start.message.usage`` and
``message_delta.usage``; the Responses API's ``response.completed`` (``.incomplete``, ``.failed``) ``response.usage``;
the Chat Completions usage chunk (``stream_options.include_usage``; vLLM's ``continuous_usage_stats`` repeats it on
every chunk); the Gemini API's ``usageMetadata`` (on the last chunk, or every chunk: cumulative); and the same
members of a non-streamed JSON answer, pretty-printed or not. Inside a JSON string a
quote is always escaped, so ``"usage"`` (or ``"usageMetadata"``) followed by ``:`` is a member name, never
answer text.

Each object found is normalised by its keys (``normalise``: Gemini's ``promptTokenCount``, Chat's ``prompt_tokens``,
the Responses ``*_details`` and ``total_tokens``, else Anthropic's) and merged with the earlier reports, each count
the larger (the reports of one answer are cumulative). Memory: a 5-byte carry between chunks and one usage object
of at most ``MAX_USAGE_BYTES`` (a larger object is skipped; the stream passes untouched). Work: one ``bytes.find``
per chunk plus a scan of the usage objects themselves. Usage is bookkeeping: nothing here can fail a request.
"""

from __future__ import annotations

import json
import re
from typing import Any

from forkpoint.bridge.translate.usage import Usage, from_anthropic, from_chat, from_gemini, from_responses

#: the largest usage object read (real ones are < 1 KiB; Anthropic's with server-tool counts a few hundred bytes)
MAX_USAGE_BYTES = 64 * 1024
NAME = b'"usage'
#: how a member name that begins with ``NAME`` may end: ``"usage"`` or ``"usageMetadata"`` (Gemini)
NAME_ENDS = (b'"', b'Metadata"')
WHITESPACE = frozenset(b" \t\r\n")
_SEEK, _COLON, _VALUE, _OBJECT, _NAME_END = range(5)
_OUTSIDE_STRING = re.compile(rb'["{}]')
_INSIDE_STRING = re.compile(rb'["\\]')


def normalise(usage: dict[str, Any]) -> Usage:
    """One ``usage`` object of any of the three protocols, recognised by its keys (an Anthropic object without
    cache counts reads the same either way: ``input_tokens`` and ``output_tokens``)."""
    if "promptTokenCount" in usage or "candidatesTokenCount" in usage:
        return from_gemini(usage)
    if "prompt_tokens" in usage or "completion_tokens" in usage:
        return from_chat(usage)
    if "input_tokens_details" in usage or "output_tokens_details" in usage or "total_tokens" in usage:
        return from_responses(usage)
    return from_anthropic(usage)


class UsageTap:
    """Feed it every byte of one answer in order; ``usage`` is what the answer reported (None: nothing)."""

    def __init__(self, max_object_bytes: int = MAX_USAGE_BYTES) -> None:
        self.max_object_bytes = max_object_bytes
        self.usage: Usage | None = None
        self._state = _SEEK
        self._carry = b""  # the end of the last chunk that could begin ``"usage``
        self._name_end = b""  # what followed ``"usage`` so far (a prefix of one of ``NAME_ENDS``)
        self._object = bytearray()
        self._depth = 0
        self._in_string = False
        self._escaped = False

    @property
    def held_bytes(self) -> int:
        """What the tap holds between chunks (bounded by ``max_object_bytes`` plus a name's length)."""
        return len(self._carry) + len(self._object)

    def reported(self) -> dict[str, int] | None:
        """The normalised counts (``Usage.as_json``), or None when the answer reported no usage."""
        return None if self.usage is None else self.usage.as_json()

    def feed(self, chunk: bytes) -> None:
        data = self._carry + chunk if self._state == _SEEK else chunk
        self._carry = b""
        at = 0
        while at < len(data):
            if self._state == _SEEK:
                found = data.find(NAME, at)
                if found == -1:
                    self._carry = data[max(at, len(data) - len(NAME) + 1):]
                    return
                at, self._state, self._name_end = found + len(NAME), _NAME_END, b""
            elif self._state == _NAME_END:
                read = self._name_end + data[at:at + 1]
                if read in NAME_ENDS:
                    self._state = _COLON
                elif not any(end.startswith(read) for end in NAME_ENDS):
                    self._state = _SEEK  # another name (``"usageX"``): look again from this byte
                    continue
                self._name_end, at = read, at + 1
            elif self._state == _OBJECT:
                at = self._scan(data, at)
            elif data[at] in WHITESPACE:
                at += 1
            elif self._state == _COLON:
                self._state = _VALUE if data[at] == ord(":") else _SEEK
                at += self._state == _VALUE  # not a member name: look again from this byte
            elif data[at] == ord("{"):
                self._state, self._depth, self._in_string, self._escaped = _OBJECT, 1, False, False
                self._object = bytearray(b"{")
                at += 1
            else:  # ``"usage": null`` (Responses' response.created) or a number: nothing to read
                self._state = _SEEK

    def _scan(self, data: bytes, start: int) -> int:
        """Follow the object's nesting from ``start``; returns where the object (or ``data``) ends."""
        at, end = start, len(data)
        while at < end:
            if self._escaped:
                self._escaped, at = False, at + 1
                continue
            found = (_INSIDE_STRING if self._in_string else _OUTSIDE_STRING).search(data, at)
            if found is None:
                at = end
                break
            at, byte = found.end(), data[found.start()]
            if self._in_string:
                self._escaped = byte == ord("\\")
                self._in_string = self._escaped
            elif byte == ord('"'):
                self._in_string = True
            else:
                self._depth += 1 if byte == ord("{") else -1
                if self._depth == 0:
                    self._object += data[start:at]
                    self._read_object()
                    return at
        self._object += data[start:at]
        if len(self._object) > self.max_object_bytes:  # not a usage object anyone sends: skipped, never held
            self._object, self._state = bytearray(), _SEEK
        return at

    def _read_object(self) -> None:
        raw, self._object, self._state = bytes(self._object), bytearray(), _SEEK
        if len(raw) > self.max_object_bytes:
            return
        try:
            value = json.loads(raw)
        except (ValueError, UnicodeDecodeError):
            return
        if isinstance(value, dict):
            found = normalise(value)
            self.usage = found if self.usage is None else self.usage.merged(found)


def usage_of(answer: bytes) -> dict[str, int] | None:
    """The usage a whole answer body (a non-streamed completion) reports, normalised; None when it reports none."""
    tap = UsageTap()
    tap.feed(answer)
    return tap.reported()
