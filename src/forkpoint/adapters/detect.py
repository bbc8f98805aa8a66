"""Guess which agent wrote a trajectory from its first bytes (for `inspect` without --agent).

Each agent's spec declares a ``sniff`` of one JSON value and a ``detection_priority``; the sniffs are asked by
priority (``forkpoint.adapters.detection_order``) and the first yes wins. The order matters where formats share
keys: a Codex record is recognised by its ``payload`` before anything else, an OpenCode export (``info.id`` =
``ses_...``) before mini-swe-agent (whose ``info`` has no such id); each spec says why it stands where it does.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from forkpoint.adapters import agent_spec, detection_order
from forkpoint.core.errors import configuration

_HEAD_BYTES = 256 * 1024


def guess_agent_from_object(obj: object) -> str | None:
    """Best guess from one top-level JSON value (a JSONL line or a whole JSON document)."""
    return next((name for name in detection_order() if agent_spec(name).sniff(obj)), None)


def guess_agent(path: Path) -> str | None:
    try:
        with path.open("rb") as handle:
            head = handle.read(_HEAD_BYTES)
    except OSError as exc:
        raise configuration(f"read trajectory {path}: {exc.strerror or exc}") from None
    # the first line, the whole head (a JSON document), then later lines (JSONL that opens with bookkeeping)
    lines = head.split(b"\n")
    for candidate in (lines[0], head, *lines[1:20]):
        try:
            guess = guess_agent_from_object(orjson.loads(candidate))
        except orjson.JSONDecodeError:
            continue
        if guess:
            return guess
    return None
