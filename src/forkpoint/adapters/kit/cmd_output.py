"""OpenHands' decoration of a command's output as the model sees it (pure): the V0 CmdOutputObservation and the V1
SDK's terminal observation render it the same way (prefix, output, suffix, then the working directory, the Python
interpreter and the exit code in brackets), so both adapters rebuild it from one place."""

from __future__ import annotations

from typing import Any


def decorate_command_output(metadata: dict[str, Any], output: str) -> str:
    """The command's ``output`` with the metadata lines the agent appends (an exit code of -1 means none)."""
    text = f"{metadata.get('prefix') or ''}{output}{metadata.get('suffix') or ''}"
    if metadata.get("working_dir"):
        text += f"\n[Current working directory: {metadata['working_dir']}]"
    if metadata.get("py_interpreter_path"):
        text += f"\n[Python interpreter: {metadata['py_interpreter_path']}]"
    exit_code = metadata.get("exit_code", -1)
    if exit_code != -1:
        text += f"\n[Command finished with exit code {exit_code}]"
    return text
