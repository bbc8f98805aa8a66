"""Qwen Code's calibration probe (forkpoint.adapters.calibrate): one recorded ``qwen -p`` run and one resume.

The session covers the re-record script's tools (scripts/record_qwen_code_fixtures.py): write_file, a shell
command, parallel read_file and glob, edit, grep_search and a failing read of a missing file. Every record names the
release's version; the replay and the resume read the session with it rewritten to the candidate. The resume is a
forkpoint continuation (kit.calibration.resume_check): the release resumes the session rebuilt with the candidate's
profile, and the candidate's gate judges its first request.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from forkpoint.adapters.kit.calibration import CliProbe, only_file, probe_cli

MODEL = "qwen3-coder-plus"
FILES = {"greet.py": "print('helo world')\n", "src/util.py": "def util():\n    return 1\n"}


def _turns(cwd: Path) -> list[list[dict[str, Any]]]:
    from forkpoint.testing.scripted_model import text, tool_use

    return [[text("I'll write the notes."), tool_use("write_file", {"file_path": f"{cwd}/notes.txt",
                                                                    "content": "todo\n"})],
            [tool_use("run_shell_command", {"command": "sleep 0.2; ls; cat notes.txt", "description": "list"})],
            [tool_use("read_file", {"file_path": f"{cwd}/greet.py"}), tool_use("glob", {"pattern": "**/*.py"})],
            [tool_use("edit", {"file_path": f"{cwd}/greet.py", "old_string": "helo", "new_string": "hello"})],
            [tool_use("grep_search", {"pattern": "def "})],
            [tool_use("read_file", {"file_path": f"{cwd}/missing.txt"})],
            [text("Done probing.")]]


def _command(entrypoint: Path, home: Path) -> list[str]:
    from forkpoint.adapters.qwen_code.runtime import write_settings
    from forkpoint.core.errors import ErrorKind

    write_settings(home, ErrorKind.TRAJECTORY)
    return [str(entrypoint), "--yolo", "--auth-type", "openai", "-m", MODEL, "-o", "json", "-p",
            "Create notes.txt, look around and fix the greeting."]


def _env(home: Path, url: str, entrypoint: Path) -> dict[str, str]:
    from forkpoint.adapters.qwen_code.runtime import qwen_env

    return qwen_env(home, url)


def _session(home: Path, cwd: Path) -> Path:
    from forkpoint.adapters.qwen_code.runtime import project_dir

    return only_file(sorted((home / ".qwen" / "projects" / project_dir(str(cwd)) / "chats").glob("*.jsonl")),
                     "session file")


def as_candidate(data: bytes, version: str, candidate: str) -> bytes:
    """Every record that names the release names ``candidate`` instead."""
    lines = [json.loads(raw) for raw in data.decode("utf-8").splitlines() if raw.strip()]
    return "".join(json.dumps({**line, "version": candidate} if isinstance(line, dict)
                              and line.get("version") == version else line, ensure_ascii=False) + "\n"
                   for line in lines).encode("utf-8")


CLI = CliProbe("qwen-code", FILES, _turns, [[False], [False], [False, False], [False], [False], [True]], MODEL,
               _command, _env, _session, recorded_version=lambda version: version, as_candidate=as_candidate)
probe = partial(probe_cli, CLI)
