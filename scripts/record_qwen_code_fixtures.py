#!/usr/bin/env python3
"""Record a REAL Qwen Code 0.24.4 run against ScriptedModel as a test fixture.

    PYTHONPATH=src python scripts/record_qwen_code_fixtures.py [SCENARIO ...]

Needs `forkpoint agents install qwen-code@0.24.4`. Writes tests/fixtures/qwen_code/0.24.4/<scenario>/:
session.jsonl (the chat recording the CLI wrote under ~/.qwen/projects/<sanitised cwd>/chats/), requests.jsonl (what
the model server received; the system prompt and tools as hashes), script.json, output.json (``-o json``),
meta.json (the cwd), workspace-initial/ and resume-after-<n>.json (the first request of ``qwen --resume`` on the
session cut after batch n, the prompt a nonce). The recording cwd (/tmp/forkpoint-rec-qwen/<scenario>) and HOME
(/tmp/forkpoint-rec-qwen-home/<scenario>) are fixed and recreated fresh; call ids are seeded, so re-recordings
differ only in record uuids, session ids, timestamps and the dates in the CLI's reminders.
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
from forkpoint.adapters.qwen_code.parse import parse_qwen
from forkpoint.adapters.qwen_code.runtime import SETTINGS, project_dir
from forkpoint.testing.script import thinking
from forkpoint.testing.scripted_model import ScriptedModel, text, tool_use

REPO = Path(__file__).resolve().parent.parent
VERSION = "0.24.4"
FIXTURES = REPO / "tests" / "fixtures" / "qwen_code" / VERSION
REC_ROOT = Path("/tmp/forkpoint-rec-qwen")
HOME_ROOT = Path("/tmp/forkpoint-rec-qwen-home")
MODEL = "qwen3-coder-plus"
NONCE = "__forkpoint_nonce_recorded_0123456789abcdef__"
CWD = REC_ROOT / "tools"
SCENARIOS: dict[str, dict[str, Any]] = {
    "tools": {
        "prompt": "Create notes.txt, look around and fix the greeting.",
        "files": {"greet.py": "print('helo world')\n", "src/util.py": "def util():\n    return 1\n"},
        "turns": [
            [text("I'll write the notes."), tool_use("write_file", {"file_path": f"{CWD}/notes.txt",
                                                                    "content": "todo\n"})],
            [tool_use("run_shell_command", {"command": "ls; cat notes.txt", "description": "list"})],
            [tool_use("read_file", {"file_path": f"{CWD}/greet.py"}), tool_use("glob", {"pattern": "**/*.py"})],
            [tool_use("edit", {"file_path": f"{CWD}/greet.py", "old_string": "helo", "new_string": "hello"})],
            [tool_use("grep_search", {"pattern": "def "})],
            [tool_use("read_file", {"file_path": f"{CWD}/missing.txt"})],
            [text("Done: notes written and the greeting fixed.")],
        ],
        "resume_after": 3,
    },
    # thought parts (Qwen models reason): stored as ``{text, thought: true}``, sent back as ``reasoning_content``
    "thinking": {
        "prompt": "Think, then look around.",
        "files": {"greet.py": "print('hi')\n"},
        "turns": [
            [thinking("Let me look at the files first."), text("Looking."),
             tool_use("run_shell_command", {"command": "ls", "description": "list"})],
            [thinking("Now the greeting."), tool_use("read_file", {"file_path": f"{REC_ROOT}/thinking/greet.py"})],
            [text("It prints hi.")],
        ],
        "resume_after": 2,
    },
}


def environment(home: Path, url: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(home), "OPENAI_API_KEY": "forkpoint-bridge",
            "OPENAI_BASE_URL": f"{url}/v1", "NO_COLOR": "1", "LANG": "C.UTF-8", "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"}


def record(name: str, scenario: dict[str, Any]) -> None:
    runtime = runtimes.find("qwen-code", VERSION)
    assert runtime is not None, f"forkpoint agents install qwen-code@{VERSION}"
    cwd, home = REC_ROOT / name, HOME_ROOT / name
    out = FIXTURES / name
    fresh_copied_scenario(cwd, out, scenario["files"], home)
    (home / ".qwen").mkdir()
    (home / ".qwen" / "settings.json").write_text(json.dumps(SETTINGS))
    model = ScriptedModel(scenario["turns"], seed=f"qwen-{name}", model=MODEL)
    with model.serve() as url:
        done = subprocess.run([str(runtime.entrypoint), "--yolo", "--auth-type", "openai", "-m", MODEL, "-o", "json",
                               "-p", scenario["prompt"]], cwd=cwd, env=environment(home, url), capture_output=True,
                              timeout=180, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    sessions = sorted((home / ".qwen" / "projects" / project_dir(str(cwd)) / "chats").glob("*.jsonl"))
    assert len(sessions) == 1, sessions
    shutil.copy(sessions[0], out / "session.jsonl")
    (out / "output.json").write_bytes(done.stdout)
    write_cli_meta(out, "qwen-code", VERSION, cwd, MODEL, scenario)
    with (out / "requests.jsonl").open("w") as handle:
        for entry in model.requests:
            handle.write(json.dumps(kept(entry)) + "\n")
    resume(out, cwd, home, runtime.entrypoint, scenario["resume_after"])
    print(f"{name}: {out}")


def kept(entry: dict[str, Any]) -> dict[str, Any]:
    body = entry.get("body") if isinstance(entry.get("body"), dict) else {}
    messages = body.get("messages") or []
    system = [m for m in messages if m.get("role") == "system"]
    return {"path": entry["path"], "kind": entry.get("kind"), "model": body.get("model"),
            "system_sha256": digest(system), "messages": [m for m in messages if m.get("role") != "system"],
            "tools_sha256": digest(body.get("tools")),
            "tool_names": [t.get("function", {}).get("name") for t in body.get("tools") or []]}


def resume(out: Path, cwd: Path, home: Path, entrypoint: Path, after: int) -> None:
    """``resume-after-<n>.json``: the first request of ``qwen --resume <id> -p NONCE`` on the session cut after batch
    n (what the gate's profile is checked against without the binary)."""
    native = parse_qwen(out / "session.jsonl").native
    records = native.records[: native.batch_end[after - 1] + 1]
    session_id = str(records[0]["sessionId"])
    chats = home / ".qwen" / "projects" / project_dir(str(cwd)) / "chats"
    for old in chats.glob("*.jsonl"):
        old.unlink()
    (chats / f"{session_id}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    model = ScriptedModel([[text("Resumed.")]], seed="qwen-resume", model=MODEL)
    with model.serve() as url:
        done = subprocess.run([str(entrypoint), "--resume", session_id, "--yolo", "--auth-type", "openai", "-m",
                               MODEL, "-o", "json", "-p", NONCE], cwd=cwd, env=environment(home, url),
                              capture_output=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    (out / f"resume-after-{after}.json").write_text(json.dumps({"after": after, "nonce": NONCE,
                                                                **kept(model.requests[0])}, indent=1))


if __name__ == "__main__":
    import sys

    for scenario_name in sys.argv[1:] or SCENARIOS:  # names given: only those scenarios
        record(scenario_name, SCENARIOS[scenario_name])
