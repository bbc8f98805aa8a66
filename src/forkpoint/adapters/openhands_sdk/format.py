"""The tool message the OpenHands SDK 1.58.2 sends the model for an observation event (pure; measured against
the SDK's own ``to_llm_message`` in tests/adapters/openhands_sdk).

- ``ObservationEvent``: ``observation.to_llm_content`` + the event's ``extended_content``. The default content is
  ``[An error occurred during execution.]\\n`` (as its own part) when ``is_error``, then the observation's
  ``content`` parts. ``TerminalObservation`` makes one text of ``metadata.prefix + text + metadata.suffix``, then
  ``\\n[Current working directory: D]``, ``\\n[Python interpreter: P]`` (when set) and ``\\n[Command finished with
  exit code N]`` (unless N is -1), truncated in the middle past ``MAX_CMD_OUTPUT_SIZE`` around a notice naming the
  file the SDK saved the whole output to (``maybe_truncate``);
- ``AgentErrorEvent``: its ``error``; ``UserRejectObservation``: ``Action rejected: <reason>``.

The parts are joined for comparison (what the model reads, in order).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePosixPath
from typing import Any

from forkpoint.adapters.kit.cmd_output import decorate_command_output

ERROR_HEADER = "[An error occurred during execution.]\n"
#: openhands.tools.terminal.constants.MAX_CMD_OUTPUT_SIZE
MAX_CMD_OUTPUT_SIZE = 30_000
#: openhands.sdk.utils.truncate's notices
TRUNCATE_NOTICE = ("<response clipped><NOTE>Due to the max output limit, only part of the full response has been "
                   "shown to you.</NOTE>")
TRUNCATE_NOTICE_WITH_PERSIST = (
    "<response clipped><NOTE>Due to the max output limit, only part of the full response has been shown to you. "
    "The complete output has been saved to {file_path} - you can use other tools to view the full content "
    "(truncated part starts around line {line_num}).</NOTE>")
#: the folder of the saved whole output (the conversation's persistence dir) differs between runs
_SAVED = re.compile(r"(<response clipped><NOTE>Due to the max output limit, only part of the full response has "
                    r"been shown to you\. The complete output has been saved to ).+?/(terminal_output_[0-9a-f]{8}"
                    r"\.txt - you can use other tools to view the full content \(truncated part starts around line "
                    r"\d+\)\.</NOTE>)", re.DOTALL)
#: the tail compared after a saved-output notice: the SDK keeps ``limit - head - len(notice)`` characters, so a
#: longer folder name keeps fewer; 14,000 is what a folder of up to ~700 characters leaves at the 30,000 limit
KEPT_TAIL = 14_000
OBSERVATION_KINDS = frozenset({"ObservationEvent", "AgentErrorEvent", "UserRejectObservation"})


def _texts(parts: Any) -> list[str]:
    return [str(p.get("text", "")) if p.get("type") == "text" else f"[{p.get('type')} content]"
            for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _terminal(observation: dict[str, Any]) -> str:
    raw = observation.get("metadata")
    metadata: dict[str, Any] = raw if isinstance(raw, dict) else {}
    out = decorate_command_output(metadata, "".join(_texts(observation.get("content"))))
    save_dir = observation.get("full_output_save_dir")
    return maybe_truncate(out, MAX_CMD_OUTPUT_SIZE, save_dir if isinstance(save_dir, str) and save_dir else None,
                          "terminal")


def maybe_truncate(content: str, limit: int, save_dir: str | None, tool_prefix: str) -> str:
    """``openhands.sdk.utils.truncate.maybe_truncate``: head and tail around a notice naming the file the SDK saves
    the whole output to (``<save_dir>/<prefix>_output_<sha256[:8]>.txt``; it writes that file when it renders the
    text, so it exists whenever the SDK could write there)."""
    if not limit or len(content) <= limit or limit < 0:
        return content
    if len(TRUNCATE_NOTICE) >= limit:
        return TRUNCATE_NOTICE[:limit]
    proposed_head = (limit - len(TRUNCATE_NOTICE)) // 2 + (limit - len(TRUNCATE_NOTICE)) % 2
    notice = TRUNCATE_NOTICE
    if save_dir:
        name = f"{tool_prefix}_output_{hashlib.sha256(content.encode('utf-8')).hexdigest()[:8]}.txt"
        notice = TRUNCATE_NOTICE_WITH_PERSIST.format(file_path=str(PurePosixPath(save_dir) / name),
                                                     line_num=len(content[:proposed_head].splitlines()) + 1)
    if len(notice) >= limit:
        return notice[:limit]
    remaining = limit - len(notice)
    head = min(proposed_head, remaining)
    tail = remaining - head
    return content[:head] + notice + (content[-tail:] if tail > 0 else "")


def normalise_saved_output(content: Any) -> Any:
    """The one volatile part of a tool text: the folder of a truncated terminal output's saved file (the
    conversation's persistence dir: the recording's, then the replay's own), and with it how much of the tail
    the notice leaves room for (the last ``KEPT_TAIL`` characters are compared)."""
    if isinstance(content, str):
        found = _SAVED.search(content)
        if found is None:
            return content
        tail = content[found.end():]
        return (content[:found.start()] + found.expand(r"\1<persistence dir>/\2")
                + (tail[-KEPT_TAIL:] if len(tail) > KEPT_TAIL else tail))
    if isinstance(content, list):
        return [normalise_saved_output(item) for item in content]
    if isinstance(content, dict):
        return {key: normalise_saved_output(value) for key, value in content.items()}
    return content


def model_parts(event: dict[str, Any]) -> list[str]:
    """The text parts of the tool message for one observation-like event."""
    kind = event.get("kind")
    if kind == "AgentErrorEvent":
        return [str(event.get("error", ""))]
    if kind == "UserRejectObservation":
        return [f"Action rejected: {event.get('rejection_reason', 'User rejected the action')}"]
    raw = event.get("observation")
    observation: dict[str, Any] = raw if isinstance(raw, dict) else {}
    parts = [ERROR_HEADER] if observation.get("is_error") else []
    if observation.get("kind") == "TerminalObservation":
        parts.append(_terminal(observation))
    else:
        parts.extend(_texts(observation.get("content")))
    return parts + _texts(event.get("extended_content"))


def model_text(event: dict[str, Any]) -> str:
    return "".join(model_parts(event))


def is_error(event: dict[str, Any]) -> bool:
    if event.get("kind") != "ObservationEvent":
        return True
    raw = event.get("observation")
    return bool(raw.get("is_error")) if isinstance(raw, dict) else False
