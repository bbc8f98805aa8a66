"""The tool message the OpenHands SDK 1.58.2 sends the model for an observation event (pure; measured against
the SDK's own ``to_llm_message`` in tests/adapters/openhands_sdk).

- ``ObservationEvent``: ``observation.to_llm_content`` + the event's ``extended_content``. The default content is
  ``[An error occurred during execution.]\\n`` (as its own part) when ``is_error``, then the observation's
  ``content`` parts. ``TerminalObservation`` makes one text of ``metadata.prefix + text + metadata.suffix``, then
  ``\\n[Current working directory: D]``, ``\\n[Python interpreter: P]`` (when set) and ``\\n[Command finished with
  exit code N]`` (unless N is -1), truncated in the middle past ``MAX_CMD_OUTPUT_SIZE`` (the SDK then saves the
  whole output to a file and names it: such a text is not rebuilt here, see ``TRUNCATED``);
- ``AgentErrorEvent``: its ``error``; ``UserRejectObservation``: ``Action rejected: <reason>``.

The parts are joined for comparison (what the model reads, in order).
"""

from __future__ import annotations

from typing import Any

ERROR_HEADER = "[An error occurred during execution.]\n"
#: openhands.tools.terminal.constants.MAX_CMD_OUTPUT_SIZE
MAX_CMD_OUTPUT_SIZE = 30_000
#: what stands for a terminal text the SDK would truncate (its notice names a file forkpoint does not rebuild)
TRUNCATED = "[forkpoint: terminal output over {limit} characters, truncated by the SDK into a saved file]"
OBSERVATION_KINDS = frozenset({"ObservationEvent", "AgentErrorEvent", "UserRejectObservation"})


def _texts(parts: Any) -> list[str]:
    return [str(p.get("text", "")) if p.get("type") == "text" else f"[{p.get('type')} content]"
            for p in parts if isinstance(p, dict)] if isinstance(parts, list) else []


def _terminal(observation: dict[str, Any]) -> str:
    raw = observation.get("metadata")
    metadata: dict[str, Any] = raw if isinstance(raw, dict) else {}
    text = "".join(_texts(observation.get("content")))
    out = f"{metadata.get('prefix') or ''}{text}{metadata.get('suffix') or ''}"
    if metadata.get("working_dir"):
        out += f"\n[Current working directory: {metadata['working_dir']}]"
    if metadata.get("py_interpreter_path"):
        out += f"\n[Python interpreter: {metadata['py_interpreter_path']}]"
    exit_code = metadata.get("exit_code", -1)
    if exit_code != -1:
        out += f"\n[Command finished with exit code {exit_code}]"
    if len(out) > MAX_CMD_OUTPUT_SIZE:
        return TRUNCATED.format(limit=MAX_CMD_OUTPUT_SIZE)
    return out


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
