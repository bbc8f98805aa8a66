"""OpenHands' command-output decoration, shared by the V0 and V1 SDK adapters' observation text."""

from __future__ import annotations

from forkpoint.adapters.kit.cmd_output import decorate_command_output


def test_the_metadata_lines_follow_the_output_and_exit_code_minus_one_is_none() -> None:
    metadata = {"prefix": "[before]\n", "suffix": "\n[after]", "working_dir": "/w", "py_interpreter_path": "/py",
                "exit_code": 2}
    assert decorate_command_output(metadata, "out") == (
        "[before]\nout\n[after]\n[Current working directory: /w]\n[Python interpreter: /py]\n"
        "[Command finished with exit code 2]")
    assert decorate_command_output({"exit_code": -1}, "out") == "out"
    assert decorate_command_output({"exit_code": 0, "prefix": None}, "") == "\n[Command finished with exit code 0]"
