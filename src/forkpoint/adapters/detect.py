"""Guess which agent wrote a trajectory from its first bytes (for `inspect` without --agent).

Each agent's spec declares a ``sniff`` of one JSON value; they are asked in DETECTION_ORDER and the first yes
wins: codex, opencode, pi, claude-code, mini-swe-agent, swe-agent, openhands. The order matters where formats
share keys: a Codex record is recognised by its ``payload`` before anything else, an OpenCode export
(``info.id`` = ``ses_...``) before mini-swe-agent (whose ``info`` has no such id).
"""

from __future__ import annotations

from pathlib import Path

import orjson

from forkpoint.adapters import agent_spec
from forkpoint.core.errors import configuration

_HEAD_BYTES = 256 * 1024
#: the order each spec's sniff is asked in (the module docstring says why)
DETECTION_ORDER = ("codex", "opencode", "pi", "claude-code", "mini-swe-agent", "swe-agent", "openhands")


def guess_agent_from_object(obj: object) -> str | None:
    """Best guess from one top-level JSON value (a JSONL line or a whole JSON document)."""
    return next((name for name in DETECTION_ORDER if agent_spec(name).sniff(obj)), None)


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
