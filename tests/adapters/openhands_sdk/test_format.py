"""The tool message text of each SDK observation kind (format.model_text), checked against the SDK's own
``to_llm_message`` where the runtime is installed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.openhands_sdk.format import (
    ERROR_HEADER,
    MAX_CMD_OUTPUT_SIZE,
    model_parts,
    model_text,
    normalise_saved_output,
)


def terminal(text: str, exit_code: int = 0, is_error: bool = False, save_dir: str | None = None) -> dict[str, Any]:
    return {"kind": "ObservationEvent", "id": "aaaaaaaa-0000", "tool_name": "terminal", "tool_call_id": "call_1",
            "action_id": "bbbbbbbb-0000", "source": "environment", "observation": {
                "kind": "TerminalObservation", "is_error": is_error, "content": [{"type": "text", "text": text}],
                "command": "x", "exit_code": exit_code, "full_output_save_dir": save_dir,
                "metadata": {"exit_code": exit_code, "working_dir": "/w", "py_interpreter_path": "", "prefix": "",
                             "suffix": f"\n[The command completed with exit code {exit_code}.]"}}}


def test_terminal_text_carries_its_metadata_lines() -> None:
    assert model_text(terminal("ok")) == ("ok\n[The command completed with exit code 0.]\n"
                                          "[Current working directory: /w]\n[Command finished with exit code 0]")
    assert model_text(terminal("boom", is_error=True)).startswith(ERROR_HEADER + "boom")


def test_errors_and_rejections() -> None:
    assert model_text({"kind": "AgentErrorEvent", "error": "bad args"}) == "bad args"
    assert model_text({"kind": "UserRejectObservation", "rejection_reason": "no"}) == "Action rejected: no"
    editor = {"kind": "ObservationEvent", "observation": {"kind": "FileEditorObservation", "is_error": True,
                                                          "content": [{"type": "text", "text": "missing"}]}}
    assert model_text(editor) == ERROR_HEADER + "missing"


def test_the_saved_output_folder_is_the_one_normalised_part() -> None:
    big = "line\n" * (MAX_CMD_OUTPUT_SIZE // 4)
    first = model_text(terminal(big, save_dir="/rec/conv/observations"))
    second = model_text(terminal(big, save_dir="/state/run/replay/observations"))
    assert len(first) <= MAX_CMD_OUTPUT_SIZE and "/rec/conv/observations/terminal_output_" in first
    assert first != second and normalise_saved_output(first) == normalise_saved_output(second)
    assert normalise_saved_output(model_text(terminal(big + "x", save_dir="/rec"))) != normalise_saved_output(first)


_SDK_RENDER = """
import json, sys
from openhands.sdk.event import ObservationEvent
import openhands.tools.terminal  # noqa: F401
for raw in json.load(open(sys.argv[1])):
    message = ObservationEvent.model_validate(raw).to_llm_message()
    print(json.dumps([part.text for part in message.content]))
"""


def test_model_parts_are_what_the_sdk_itself_renders(tmp_path: Path) -> None:
    """Measured on the real SDK: short, failing, and truncated terminal outputs (with and without a save dir)."""
    runtime = runtimes.find("openhands-sdk", "1.58.2")
    if runtime is None:
        pytest.skip("openhands-sdk 1.58.2 is not installed")
    big = "".join(f"row {i} " + "é" * (i % 7) + "\n" for i in range(6000))
    events = [terminal("ok"), terminal("boom", exit_code=2, is_error=True), terminal(big),
              terminal(big, save_dir=str(tmp_path / "observations")), terminal("x" * 40_000, save_dir=str(tmp_path))]
    source = tmp_path / "events.json"
    source.write_text(json.dumps(events))
    done = subprocess.run([str(runtime.entrypoint), "-I", "-c", _SDK_RENDER, str(source)], capture_output=True,
                          text=True, timeout=300, check=False, cwd=tmp_path,
                          env={"LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENHANDS_SUPPRESS_BANNER": "1",
                               "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    rendered = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("[")]
    assert rendered == [model_parts(event) for event in events]
