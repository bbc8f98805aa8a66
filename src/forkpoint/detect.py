"""Guess which agent wrote a trajectory from its first bytes (for `inspect` without --agent)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from forkpoint.errors import configuration

_HEAD_BYTES = 256 * 1024


def guess_agent_from_object(obj: Any) -> str | None:
    """Best guess from one top-level JSON value (a JSONL line or a whole JSON document)."""
    if not isinstance(obj, dict):
        return "openhands" if isinstance(obj, list) else None
    kind = obj.get("type")
    if kind == "session_meta" or (isinstance(obj.get("payload"), dict) and "timestamp" in obj):
        return "codex"
    if kind in ("step_start", "step_finish", "tool_use", "text") and "sessionID" in obj:
        return "opencode"
    if kind in ("agent_start", "turn_start", "turn_end", "message_start", "tool_execution_start") or (
        kind == "session" and "version" in obj and "cwd" in obj
    ):
        return "pi"
    if "uuid" in obj and ("parentUuid" in obj or "sessionId" in obj):
        return "claude-code"
    if kind in ("queue-operation", "summary", "last-prompt", "file-history-snapshot"):
        return "claude-code"
    info = obj.get("info")
    if isinstance(info, dict) and str(info.get("id", "")).startswith("ses_") and "messages" in obj:
        return "opencode"  # an `opencode export` (mini-swe-agent's info has no ses_ id)
    if "trajectory_format" in obj or ("messages" in obj and "info" in obj):
        return "mini-swe-agent"
    if "trajectory" in obj and "history" in obj:
        return "swe-agent"
    return None


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
