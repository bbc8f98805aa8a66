"""GitHub Copilot CLI's calibration probe (forkpoint.adapters.calibrate): one recorded ``copilot -p`` run on its
BYOK provider (ScriptedModel, ``COPILOT_OFFLINE=true``: no GitHub service) and one resume.

The session covers the re-record script's tools (scripts/record_copilot_cli_fixtures.py): bash, parallel views of
a file and a folder, edit, parallel create (one into a missing folder), grep and glob, a failing view and edit, a
bash exiting 3 after a ``cd`` and a bash showing the shell's cwd kept across calls. The session's ``session.start``
names the release (``copilotVersion``); the replay and the resume read it rewritten to the candidate. The resume is
a forkpoint continuation (kit.calibration.resume_check): ``copilot --resume`` of the session rebuilt with the
candidate's profile, the candidate's gate judging its first request.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from forkpoint.adapters.kit.calibration import CliProbe, only_file, probe_cli

MODEL = "gpt-4.1"
FILES = {"greet.py": "print('helo world')\n", "src/util.py": "def util():\n    return 1\n"}


def _turns(cwd: Path) -> list[list[dict[str, Any]]]:
    from forkpoint.testing.scripted_model import text, tool_use

    def bash(command: str, description: str) -> dict[str, Any]:
        return tool_use("bash", {"command": command, "description": description})

    return [[text("I'll look first."), bash("ls; echo todo > notes.txt; cat notes.txt", "List and write notes")],
            [tool_use("view", {"path": f"{cwd}/greet.py"}), tool_use("view", {"path": str(cwd)})],
            [tool_use("edit", {"path": f"{cwd}/greet.py", "old_str": "helo", "new_str": "hello"})],
            [tool_use("create", {"path": f"{cwd}/src/extra.py", "file_text": "X = 1\n"}),
             tool_use("create", {"path": f"{cwd}/missing/dir.py", "file_text": "x\n"})],
            [tool_use("grep", {"pattern": "hello"}), tool_use("glob", {"pattern": "**/*.py"})],
            [tool_use("view", {"path": f"{cwd}/absent.txt"}),
             tool_use("edit", {"path": f"{cwd}/greet.py", "old_str": "nope", "new_str": "x"})],
            [bash("cd src && pwd; exit 3", "Fail on purpose")],
            [bash("pwd", "Where am I")],
            [text("Done probing.")]]


def _command(entrypoint: Path, home: Path) -> list[str]:
    from forkpoint.adapters.copilot_cli.runtime import pkg_cache, redundant_options

    pkg_cache(entrypoint).mkdir(exist_ok=True)
    return [str(entrypoint), "--allow-all", *redundant_options(entrypoint), "--no-ask-user", "-p",
            "Create notes, look around and fix the greeting."]


def _env(home: Path, url: str, entrypoint: Path) -> dict[str, str]:
    from forkpoint.adapters.copilot_cli.runtime import copilot_env

    return copilot_env(home, f"{url}/v1", MODEL, entrypoint)


def _session(home: Path, cwd: Path) -> Path:
    return only_file(sorted((home / ".copilot" / "session-state").glob("*/events.jsonl")), "session-state events")


def as_candidate(data: bytes, version: str, candidate: str) -> bytes:
    """The session's first event (``session.start``) names ``candidate`` instead of the release."""
    import json

    first, _, rest = data.partition(b"\n")
    start = json.loads(first)
    if isinstance(start, dict) and isinstance(start.get("data"), dict) \
            and start["data"].get("copilotVersion") == version:
        start = {**start, "data": {**start["data"], "copilotVersion": candidate}}
    return json.dumps(start, ensure_ascii=False).encode("utf-8") + b"\n" + rest


def diagnose(stderr: str) -> str | None:
    """A release that asks for GitHub authentication runs no BYOK provider offline (0.0.420: "To authenticate, you
    can use any of the following methods")."""
    if "To authenticate, you can use any of the following methods" in stderr:
        return ("it asks for GitHub authentication on forkpoint's BYOK provider with COPILOT_OFFLINE=true "
                "(forkpoint gives it no GitHub token)")
    return None


CLI = CliProbe("copilot-cli", FILES, _turns,
               [[False], [False, False], [False], [False, True], [False, False], [True, True], [False], [False]],
               MODEL, _command, _env, _session, recorded_version=lambda version: version, as_candidate=as_candidate,
               diagnose=diagnose)
probe = partial(probe_cli, CLI)
