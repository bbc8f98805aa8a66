"""Gemini CLI's calibration probe (forkpoint.adapters.calibrate): one recorded ``gemini -p`` run and one resume.

The session covers the re-record script's tools (scripts/record_gemini_cli_fixtures.py): write_file, a shell
command, parallel read_file and list_directory, replace, parallel glob and grep_search, and a failing read of a
missing file. A Gemini CLI session names no CLI version, so the parse check asks only that it reads with every
call. The resume is a forkpoint continuation (kit.calibration.resume_check): the release, given the session rebuilt
with the candidate's profile as ``--session-file``, and the candidate's gate judging its first request.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from forkpoint.adapters.kit.calibration import CliProbe, only_file, probe_cli

MODEL = "gemini-2.5-pro"
FILES = {"greet.py": "print('helo world')\n", "src/util.py": "def util():\n    return 1\n"}


def _turns(cwd: Path) -> list[list[dict[str, Any]]]:
    from forkpoint.testing.scripted_model import text, tool_use

    return [[text("I'll write the notes."), tool_use("write_file", {"file_path": "notes.txt", "content": "todo\n"})],
            [tool_use("run_shell_command", {"command": "sleep 0.2; ls; cat notes.txt", "description": "list"})],
            [tool_use("read_file", {"file_path": "greet.py"}), tool_use("list_directory", {"dir_path": "."})],
            [tool_use("replace", {"file_path": "greet.py", "old_string": "helo", "new_string": "hello",
                                  "instruction": "fix the typo"})],
            [tool_use("glob", {"pattern": "**/*.py"}), tool_use("grep_search", {"pattern": "def "})],
            [tool_use("read_file", {"file_path": "missing.txt"})],
            [text("Done probing.")]]


def _command(entrypoint: Path, home: Path) -> list[str]:
    from forkpoint.adapters.gemini_cli.runtime import write_settings
    from forkpoint.core.errors import ErrorKind

    write_settings(home, ErrorKind.TRAJECTORY)
    return [str(entrypoint), "--yolo", "--skip-trust", "-m", MODEL, "-o", "json", "-p",
            "Create notes.txt, look around and fix the greeting."]


def _env(home: Path, url: str, entrypoint: Path) -> dict[str, str]:
    from forkpoint.adapters.gemini_cli.runtime import gemini_env

    return gemini_env(home, url)


def _session(home: Path, cwd: Path) -> Path:
    return only_file(sorted((home / ".gemini" / "tmp").glob("*/chats/session-*.jsonl")), "session file")


CLI = CliProbe("gemini-cli", FILES, _turns, [[False], [False], [False, False], [False], [False, False], [True]], MODEL,
               _command, _env, _session, recorded_version=lambda version: None,
               as_candidate=lambda data, version, candidate: data)  # the session names no version
probe = partial(probe_cli, CLI)
