"""Guess which agent wrote a trajectory from its first bytes (for `inspect` without --agent).

Each agent's spec declares a ``sniff`` of one JSON value and a ``detection_priority``; the sniffs are asked by
priority (``forkpoint.adapters.detection_order``) and the first yes wins. The order matters where formats share
keys: a Codex record is recognised by its ``payload`` before anything else, an OpenCode export (``info.id`` =
``ses_...``) before mini-swe-agent (whose ``info`` has no such id); each spec says why it stands where it does.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import BinaryIO

import orjson

from forkpoint.adapters import agent_spec, detection_order
from forkpoint.core.errors import configuration
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES

_HEAD_BYTES = 256 * 1024
_CHUNK = 256 * 1024
#: nesting kept in a large document's outline: the top-level keys and the members of their values
_KEEP_DEPTH = 2
_MAX_STRING = 512
_MAX_OUTLINE = 4 * 1024 * 1024


def guess_agent_from_object(obj: object) -> str | None:
    """Best guess from one top-level JSON value (a JSONL line or a whole JSON document)."""
    return next((name for name in detection_order() if agent_spec(name).sniff(obj)), None)


def guess_agent(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> str | None:
    try:
        with path.open("rb") as handle:
            head = handle.read(_HEAD_BYTES)
            # the first line, the whole head (a JSON document), then later lines (JSONL that opens with bookkeeping)
            lines = head.split(b"\n")
            for candidate in (lines[0], head, *lines[1:20]):
                try:
                    guess = guess_agent_from_object(orjson.loads(candidate))
                except orjson.JSONDecodeError:
                    continue
                if guess:
                    return guess
            if len(head) < _HEAD_BYTES or head.lstrip()[:1] not in (b"{", b"["):
                return None
            # one JSON document larger than the head (mini-swe-agent and OpenCode exports): its outline, streamed
            handle.seek(0)
            outline = skeleton(handle, max_bytes)
    except OSError as exc:
        raise configuration(f"read trajectory {path}: {exc.strerror or exc}") from None
    return guess_agent_from_object(outline) if outline is not None else None


_TOKENS = re.compile(rb'["{}\[\]]')
_IN_STRING = re.compile(rb'["\\]')


def skeleton(handle: BinaryIO, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> object | None:
    """The outline of one JSON document read in chunks: containers nested deeper than ``_KEEP_DEPTH`` become empty,
    long strings are cut, so what every sniff reads (top-level keys, ``info.id``) survives in bounded memory. None
    when it is not one well-formed document within ``max_bytes`` (the parsers' bound)."""
    out = bytearray()
    depth, skip_from, in_string, escape, keep = 0, 0, False, False, False
    string = bytearray()
    read = 0
    while read < max_bytes:
        chunk = handle.read(min(_CHUNK, max_bytes - read))
        if not chunk:
            return None
        read += len(chunk)
        i = 0
        while i < len(chunk):
            if in_string:
                if escape:
                    if keep:
                        string += chunk[i:i + 1]
                    escape, i = False, i + 1
                    continue
                match = _IN_STRING.search(chunk, i)
                end = match.start() if match else len(chunk)
                if keep:
                    string += chunk[i:end]
                if match is None:
                    i = end
                elif chunk[end:end + 1] == b"\\":
                    if keep:
                        string += b"\\"
                    escape, i = True, end + 1
                else:
                    in_string, i = False, end + 1
                    if keep:
                        out += b'"' + _short(string) + b'"'
                if len(string) > _MAX_STRING:  # keep a bounded head only
                    del string[_MAX_STRING:]
                continue
            match = _TOKENS.search(chunk, i)
            end = match.start() if match else len(chunk)
            if not skip_from:
                out += chunk[i:end]
            if match is None:
                i = end
                continue
            token, i = chunk[end:end + 1], end + 1
            if token == b'"':
                in_string, keep = True, not skip_from
                string.clear()
            elif token in (b"{", b"["):
                depth += 1
                if not skip_from and depth > _KEEP_DEPTH:
                    skip_from = depth
                    out += b"{}" if token == b"{" else b"[]"
                elif not skip_from:
                    out += token
            else:
                if skip_from == depth:
                    skip_from = 0
                elif not skip_from:
                    out += token
                depth -= 1
                if depth <= 0:
                    try:
                        outline: object = orjson.loads(bytes(out).decode("utf-8", "replace"))
                        return outline
                    except orjson.JSONDecodeError:
                        return None
            if len(out) > _MAX_OUTLINE:
                return None
    return None


def _short(string: bytearray) -> bytes:
    """A kept string, cut to a prefix that stays a valid JSON string (no half escape)."""
    if len(string) < _MAX_STRING:
        return bytes(string)
    head = bytes(string[:_MAX_STRING // 2])
    cut = head.rfind(b"\\")
    return head[:cut] if cut >= 0 else head
