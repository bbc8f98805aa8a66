#!/usr/bin/env python3
"""Record a REAL Gemini CLI 0.61.0 run against ScriptedModel as a test fixture.

    PYTHONPATH=src python scripts/record_gemini_cli_fixtures.py

Needs `forkpoint agents install gemini-cli@0.61.0`. Writes tests/fixtures/gemini_cli/0.61.0/<scenario>/:
session.jsonl (the chat recording the CLI wrote under ~/.gemini/tmp/<project>/chats/), requests.jsonl (what the
model server received; systemInstruction and tools as hashes), script.json, output.json (``-o json``), meta.json
(the cwd), workspace-initial/ and resume-after-3.json (the first request of a ``--session-file`` resume of the
session cut after batch 3, the prompt a nonce). The recording cwd (/tmp/forkpoint-rec-gemini/<scenario>) and
HOME (/tmp/forkpoint-rec-gemini-home/<scenario>) are fixed and recreated fresh; call ids are seeded, so re-recordings
differ only in session/message ids, timestamps and the shell's process group id.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from fixture_recording import digest, fresh_copied_scenario, write_cli_meta

from forkpoint import runtimes
from forkpoint.adapters.gemini_cli.parse import dumps, parse_gemini
from forkpoint.adapters.gemini_cli.runtime import SETTINGS
from forkpoint.testing.scripted_model import ScriptedModel, text, tool_use

REPO = Path(__file__).resolve().parent.parent
VERSION = "0.61.0"
FIXTURES = REPO / "tests" / "fixtures" / "gemini_cli" / VERSION
REC_ROOT = Path("/tmp/forkpoint-rec-gemini")
HOME_ROOT = Path("/tmp/forkpoint-rec-gemini-home")
MODEL = "gemini-2.5-pro"
NONCE = "__forkpoint_nonce_recorded_0123456789abcdef__"
SCENARIOS: dict[str, dict[str, Any]] = {
    "tools": {
        "prompt": "Create notes.txt, look around and fix the greeting.",
        "files": {"greet.py": "print('helo world')\n", "src/util.py": "def util():\n    return 1\n"},
        "turns": [
            [text("I'll write the notes."), tool_use("write_file", {"file_path": "notes.txt", "content": "todo\n"})],
            [tool_use("run_shell_command", {"command": "ls; cat notes.txt", "description": "list"})],
            [tool_use("read_file", {"file_path": "greet.py"}), tool_use("list_directory", {"dir_path": "."})],
            [tool_use("replace", {"file_path": "greet.py", "old_string": "helo", "new_string": "hello",
                                  "instruction": "fix the typo"})],
            [tool_use("glob", {"pattern": "**/*.py"}), tool_use("grep_search", {"pattern": "def "})],
            [tool_use("read_file", {"file_path": "missing.txt"})],
            [text("Done: notes written and the greeting fixed.")],
        ],
        "resume_after": 3,
    },
}


def record(name: str, scenario: dict[str, Any]) -> None:
    runtime = runtimes.find("gemini-cli", VERSION)
    assert runtime is not None, f"forkpoint agents install gemini-cli@{VERSION}"
    cwd, home = REC_ROOT / name, HOME_ROOT / name
    out = FIXTURES / name
    fresh_copied_scenario(cwd, out, scenario["files"], home)
    (home / ".gemini").mkdir()
    (home / ".gemini" / "settings.json").write_text(json.dumps(SETTINGS))
    model = ScriptedModel(scenario["turns"], seed=f"gemini-{name}", model=MODEL)
    with model.serve() as url:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "GEMINI_API_KEY": "forkpoint-bridge",
               "GOOGLE_GEMINI_BASE_URL": url, "NO_COLOR": "1", "LANG": "C.UTF-8"}
        done = subprocess.run([str(runtime.entrypoint), "--yolo", "--skip-trust", "-m", MODEL, "-o", "json", "-p",
                               scenario["prompt"]], cwd=cwd, env=env, capture_output=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    sessions = sorted((home / ".gemini" / "tmp").glob("*/chats/session-*.jsonl"))
    assert len(sessions) == 1, sessions
    shutil.copy(sessions[0], out / "session.jsonl")
    (out / "output.json").write_bytes(done.stdout)
    write_cli_meta(out, "gemini-cli", VERSION, cwd, MODEL, scenario)
    with (out / "requests.jsonl").open("w") as handle:
        for entry in model.requests:
            body = entry.get("body") if isinstance(entry.get("body"), dict) else {}
            kept = {"path": entry["path"], "kind": entry.get("kind"), "contents": body.get("contents"),
                    "generationConfig": body.get("generationConfig"),
                    "systemInstruction_sha256": digest(body.get("systemInstruction")),
                    "tools_sha256": digest(body.get("tools")),
                    "tool_names": [d.get("name") for t in body.get("tools") or [] for d in
                                   t.get("functionDeclarations") or []]}
            handle.write(json.dumps(kept) + "\n")
    resume(out, cwd, home, runtime.entrypoint, scenario["resume_after"])
    print(f"{name}: {out}")


def resume(out: Path, cwd: Path, home: Path, entrypoint: Path, after: int) -> None:
    """``resume-after-<n>.json``: the first request of ``gemini --session-file <the session cut after batch n> -p
    NONCE`` (what the gate's profile is checked against without the binary)."""
    native = parse_gemini(out / "session.jsonl").native
    cut = home / ".gemini" / "forkpoint" / "cut.jsonl"
    cut.parent.mkdir(parents=True, exist_ok=True)
    messages = native.messages[: native.batch_end[after - 1] + 1]
    cut.write_bytes(b"".join(line + b"\n" for line in [dumps(native.header), *map(dumps, messages)]))
    model = ScriptedModel([[text("Resumed.")]], seed="gemini-resume", model=MODEL)
    with model.serve() as url:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "GEMINI_API_KEY": "forkpoint-bridge",
               "GOOGLE_GEMINI_BASE_URL": url, "NO_COLOR": "1", "LANG": "C.UTF-8"}
        done = subprocess.run([str(entrypoint), "--session-file", str(cut), "--yolo", "--skip-trust", "-m", MODEL,
                               "-o", "json", "-p", NONCE], cwd=cwd, env=env, capture_output=True, timeout=180,
                              check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    first = model.requests[0]
    (out / f"resume-after-{after}.json").write_text(json.dumps({
        "after": after, "nonce": NONCE, "path": first["path"], "contents": first["body"]["contents"],
        "systemInstruction_sha256": digest(first["body"].get("systemInstruction")),
        "tool_names": [d.get("name") for t in first["body"].get("tools") or [] for d in
                       t.get("functionDeclarations") or []]}, indent=1))


if __name__ == "__main__":
    for scenario_name, scenario in SCENARIOS.items():
        record(scenario_name, scenario)
