"""The tool message text of each SDK observation kind (format.model_text)."""

from __future__ import annotations

from forkpoint.adapters.openhands_sdk.format import ERROR_HEADER, MAX_CMD_OUTPUT_SIZE, TRUNCATED, model_text


def terminal(text: str, exit_code: int = 0, is_error: bool = False) -> dict[str, object]:
    return {"kind": "ObservationEvent", "observation": {
        "kind": "TerminalObservation", "is_error": is_error, "content": [{"type": "text", "text": text}],
        "metadata": {"exit_code": exit_code, "working_dir": "/w", "py_interpreter_path": "", "prefix": "",
                     "suffix": f"\n[The command completed with exit code {exit_code}.]"}}}


def test_terminal_text_carries_its_metadata_lines() -> None:
    assert model_text(terminal("ok")) == ("ok\n[The command completed with exit code 0.]\n"
                                          "[Current working directory: /w]\n[Command finished with exit code 0]")
    assert model_text(terminal("boom", is_error=True)).startswith(ERROR_HEADER + "boom")


def test_a_terminal_text_the_sdk_would_truncate_is_marked_not_rebuilt() -> None:
    """The SDK cuts it and names a saved file forkpoint does not have: both sides compare as the same marker."""
    assert model_text(terminal("x" * (MAX_CMD_OUTPUT_SIZE + 1))) == TRUNCATED.format(limit=MAX_CMD_OUTPUT_SIZE)


def test_errors_and_rejections() -> None:
    assert model_text({"kind": "AgentErrorEvent", "error": "bad args"}) == "bad args"
    assert model_text({"kind": "UserRejectObservation", "rejection_reason": "no"}) == "Action rejected: no"
    editor = {"kind": "ObservationEvent", "observation": {"kind": "FileEditorObservation", "is_error": True,
                                                          "content": [{"type": "text", "text": "missing"}]}}
    assert model_text(editor) == ERROR_HEADER + "missing"
