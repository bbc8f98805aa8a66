"""The text OpenHands 0.62.0 shows the model for an observation event (pure; ``ConversationMemory``).

``_process_observation`` turns each observation into a ``tool`` message whose text is, by type:

- ``run`` (CmdOutputObservation): ``prefix + content + suffix``, then ``\\n[Current working directory: D]``,
  ``\\n[Python interpreter: P]`` (when set), ``\\n[Command finished with exit code N]`` (unless N is -1);
- ``error``: the content plus ``\\n[Error occurred in processing last action]``;
- ``edit`` (oh_aci), ``read``, ``think`` and the rest: the content;

everything but ``read`` cut by ``truncate_content`` at ``max_message_chars`` (30000 by default): the head and tail
halves around ``\\n[... Observation truncated due to length ...]\\n``.
"""

from __future__ import annotations

from typing import Any

from forkpoint.adapters.kit.cmd_output import decorate_command_output

MAX_MESSAGE_CHARS = 30_000
TRUNCATION_NOTE = "\n[... Observation truncated due to length ...]\n"


def truncate_content(content: str, max_chars: int = MAX_MESSAGE_CHARS) -> str:
    if len(content) <= max_chars or max_chars < 0:
        return content
    half = max_chars // 2
    return content[:half] + TRUNCATION_NOTE + content[-half:]


def model_text(event: dict[str, Any], max_chars: int = MAX_MESSAGE_CHARS) -> str:
    kind = event.get("observation")
    raw = event.get("content")
    content = raw if isinstance(raw, str) else ""
    extras_raw = event.get("extras")
    extras: dict[str, Any] = extras_raw if isinstance(extras_raw, dict) else {}
    if kind == "run":
        raw_metadata = extras.get("metadata")
        metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
        return truncate_content(decorate_command_output(metadata, content), max_chars)
    if kind == "error":
        return truncate_content(content, max_chars) + "\n[Error occurred in processing last action]"
    if kind == "read":
        return content
    return truncate_content(content, max_chars)
