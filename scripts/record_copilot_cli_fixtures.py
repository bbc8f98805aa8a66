#!/usr/bin/env python3
"""Record a REAL GitHub Copilot CLI 1.0.102 run against ScriptedModel as a test fixture.

    PYTHONPATH=src python scripts/record_copilot_cli_fixtures.py

Needs `forkpoint agents install copilot-cli@1.0.102`. The CLI runs on its documented BYOK provider
(COPILOT_PROVIDER_BASE_URL = ScriptedModel's Chat Completions endpoint, COPILOT_OFFLINE=true): no GitHub service is
asked. Writes tests/fixtures/copilot_cli/1.0.102/<scenario>/: session.jsonl (the session-state events.jsonl the CLI
wrote under $COPILOT_HOME/session-state/<id>/), requests.jsonl (what the model server received; the system prompt
and tools as hashes), script.json, meta.json (the cwd), workspace-initial/ and resume-after-3.json (the first request
of a ``copilot --resume=<id> -p NONCE`` of the session cut after batch 3). The recording cwd
(/tmp/forkpoint-rec-copilot/<scenario>) and HOME (/tmp/forkpoint-rec-copilot-home/<scenario>) are fixed and
recreated fresh; call ids are seeded, so re-recordings differ only in event/session ids and timestamps.
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
from forkpoint.adapters.copilot_cli.parse import dumps, parse_copilot
from forkpoint.adapters.copilot_cli.runtime import pkg_cache
from forkpoint.testing.scripted_model import ScriptedModel, text, tool_use

REPO = Path(__file__).resolve().parent.parent
VERSION = "1.0.102"
FIXTURES = REPO / "tests" / "fixtures" / "copilot_cli" / VERSION
REC_ROOT = Path("/tmp/forkpoint-rec-copilot")
HOME_ROOT = Path("/tmp/forkpoint-rec-copilot-home")
MODEL = "gpt-4.1"
NONCE = "__forkpoint_nonce_recorded_0123456789abcdef__"
W = str(REC_ROOT / "tools")
SCENARIOS: dict[str, dict[str, Any]] = {
    "tools": {
        "prompt": "Create notes, look around and fix the greeting.",
        "files": {"greet.py": "print('helo world')\n", "src/util.py": "def util():\n    return 1\n"},
        "turns": [
            [text("I'll look first."), tool_use("bash", {"command": "ls; echo todo > notes.txt; cat notes.txt",
                                                         "description": "List and write notes"})],
            [tool_use("view", {"path": f"{W}/greet.py"}), tool_use("view", {"path": W})],
            [tool_use("edit", {"path": f"{W}/greet.py", "old_str": "helo", "new_str": "hello"})],
            [tool_use("create", {"path": f"{W}/src/extra.py", "file_text": "X = 1\n"}),
             tool_use("create", {"path": f"{W}/missing/dir.py", "file_text": "x\n"})],
            [tool_use("grep", {"pattern": "hello"}), tool_use("glob", {"pattern": "**/*.py"})],
            [tool_use("view", {"path": f"{W}/absent.txt"}),
             tool_use("edit", {"path": f"{W}/greet.py", "old_str": "nope", "new_str": "x"})],
            [tool_use("bash", {"command": "cd src && pwd; exit 3", "description": "Fail on purpose"})],
            [tool_use("bash", {"command": "pwd", "description": "Where am I"})],
            [text("Done: notes written and the greeting fixed.")],
        ],
        "resume_after": 3,
    },
}


def env_for(home: Path, url: str, entrypoint: Path) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": str(home), "COPILOT_PROVIDER_BASE_URL": url + "/v1",
            "COPILOT_PROVIDER_API_KEY": "forkpoint-bridge", "COPILOT_OFFLINE": "true", "COPILOT_MODEL": MODEL,
            "COPILOT_AUTO_UPDATE": "false", "COPILOT_PKG_CACHE_HOME": str(pkg_cache(entrypoint)),
            "NO_COLOR": "1", "LANG": "C.UTF-8"}


def record(name: str, scenario: dict[str, Any]) -> None:
    runtime = runtimes.find("copilot-cli", VERSION)
    assert runtime is not None, f"forkpoint agents install copilot-cli@{VERSION}"
    cwd, home = REC_ROOT / name, HOME_ROOT / name
    out = FIXTURES / name
    fresh_copied_scenario(cwd, out, scenario["files"], home)
    model = ScriptedModel(scenario["turns"], seed=f"copilot-{name}", model=MODEL)
    with model.serve() as url:
        done = subprocess.run([str(runtime.entrypoint), "--allow-all", "--no-auto-update",
                               "--disable-client-telemetry", "-p", scenario["prompt"]], cwd=cwd,
                              env=env_for(home, url, runtime.entrypoint), capture_output=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    sessions = sorted((home / ".copilot" / "session-state").glob("*/events.jsonl"))
    assert len(sessions) == 1, sessions
    shutil.copy(sessions[0], out / "session.jsonl")
    write_cli_meta(out, "copilot-cli", VERSION, cwd, MODEL, scenario)
    with (out / "requests.jsonl").open("w") as handle:
        for entry in model.requests:
            body = entry.get("body") if isinstance(entry.get("body"), dict) else {}
            messages = body.get("messages") or []
            kept = {"path": entry["path"], "kind": entry.get("kind"), "messages": messages[1:],
                    "system_sha256": digest(messages[:1]), "tools_sha256": digest(body.get("tools")),
                    "tool_names": [t.get("function", {}).get("name") for t in body.get("tools") or []],
                    "params": {k: v for k, v in body.items() if k not in ("messages", "tools")}}
            handle.write(json.dumps(kept) + "\n")
    resume(out, cwd, home, runtime.entrypoint, scenario["resume_after"])
    print(f"{name}: {out}")


def resume(out: Path, cwd: Path, home: Path, entrypoint: Path, after: int) -> None:
    """``resume-after-<n>.json``: the first request of ``copilot --resume=<id> -p NONCE`` of the session cut after
    batch n (written as session-state/<id>/events.jsonl alone, the other files removed)."""
    native = parse_copilot(out / "session.jsonl").native
    state = home / ".copilot" / "session-state"
    shutil.rmtree(state)
    for leftover in (home / ".copilot").glob("session-store.db*"):
        leftover.unlink()
    cut = state / native.session_id / "events.jsonl"
    cut.parent.mkdir(parents=True)
    cut.write_bytes(b"".join(dumps(e) + b"\n" for e in native.events[: native.batch_end[after - 1] + 1]))
    model = ScriptedModel([[text("Resumed.")]], seed="copilot-resume", model=MODEL)
    with model.serve() as url:
        done = subprocess.run([str(entrypoint), "--allow-all", "--no-auto-update", "--disable-client-telemetry",
                               f"--resume={native.session_id}", "-p", NONCE], cwd=cwd,
                              env=env_for(home, url, entrypoint), capture_output=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    first = model.requests[0]["body"]
    (out / f"resume-after-{after}.json").write_text(json.dumps({
        "after": after, "nonce": NONCE, "messages": first["messages"][1:],
        "system_sha256": digest(first["messages"][:1]),
        "tool_names": [t.get("function", {}).get("name") for t in first.get("tools") or []]}, indent=1))


if __name__ == "__main__":
    for scenario_name, scenario in SCENARIOS.items():
        record(scenario_name, scenario)
