#!/usr/bin/env python3
"""Record REAL OpenHands SDK 1.58.2 conversations (openhands-sdk + openhands-tools) against ScriptedModel.

    python scripts/record_openhands_sdk_fixtures.py [--scenario S ...]

Needs the runtime (`forkpoint agents install openhands-sdk@1.58.2`). Each scenario runs forkpoint's companion
runner (src/forkpoint/adapters/openhands_sdk/runner.py, mode ``record``) on the runtime's Python: the SDK's own
``Conversation`` with an ``Agent`` holding TerminalTool, FileEditorTool and TaskTrackerTool, a LocalWorkspace in
/tmp/forkpoint-rec-openhands-sdk/<scenario> (recreated from the scenario's initial files) and a persistence dir,
litellm talking OpenAI Chat Completions to ScriptedModel. Writes tests/fixtures/openhands-sdk/1.58.2/<scenario>/:
conversation/ (the SDK's own persisted conversation: base_state.json and events/event-NNNNN-<id>.json, copied
as written; lock and length-marker files left out), requests.jsonl (what the model server received: ``messages``
whole, ``tools`` as a hash + names), script.json, meta.json and workspace-initial/.

Re-recordings differ in event ids (uuid4), timestamps, the conversation id, latencies and litellm response ids
(ScriptedModel's call ids are seeded, so call ids are stable).

The scenarios avoid a top-level ``exit N`` in a terminal command: it kills the SDK's tmux shell (the observation
is then a reset notice after a 30 s wait, not the command's output).
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fixture_recording import (
    fresh_copied_scenario,
    run_python_runner,
    summarise_chat_request,
    write_requests,
    write_script,
)

from forkpoint import runtimes
from forkpoint.testing.scripted_model import Block, ScriptedModel, text, tool_use

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "openhands-sdk"
REC_ROOT = Path("/tmp/forkpoint-rec-openhands-sdk")
RUNNER = REPO / "src" / "forkpoint" / "adapters" / "openhands_sdk" / "runner.py"
VERSION = "1.58.2"
MODEL = "openai/scripted"
TOOLS = ["terminal", "file_editor", "task_tracker"]
RUN_TIMEOUT_S = 300.0
Json = dict[str, Any]


def terminal(command: str) -> Block:
    return tool_use("terminal", {"command": command, "security_risk": "LOW"})


def editor(command: str, path: str, **fields: Any) -> Block:
    return tool_use("file_editor", {"command": command, "path": path, **fields, "security_risk": "LOW"})


def finish(message: str) -> Block:
    return tool_use("finish", {"message": message})


def scenarios(root: Path) -> dict[str, tuple[str, list[list[Block]], dict[str, str]]]:
    """name -> (task, turns, initial files). The file editor needs absolute paths."""
    basic = root / "basic"
    parallel = root / "parallel"
    errors = root / "errors"
    return {
        "basic": ("Create pkg/calc.py with an add() function and make sure add(2, 3) is 5.", [
            [text("I'll create the package first."),
             terminal("mkdir -p pkg && printf 'def add(a, b):\\n    return a - b\\n' > pkg/calc.py && echo created")],
            [editor("view", f"{basic}/pkg/calc.py")],
            [text("The operator is wrong."),
             editor("str_replace", f"{basic}/pkg/calc.py", old_str="return a - b", new_str="return a + b")],
            [terminal("python3 -c 'import pkg.calc as c; print(c.add(2, 3))'")],
            [finish("add(2, 3) is 5 now.")],
        ], {}),
        "parallel": ("Look at the notes and the listing, plan, then summarise.", [
            [text("Two things at once."), terminal("ls -1"), editor("view", f"{parallel}/notes.txt")],
            [tool_use("task_tracker", {"command": "plan", "task_list": [
                {"title": "count lines", "notes": "", "status": "in_progress"},
                {"title": "write summary", "notes": "", "status": "todo"}]})],
            [terminal("grep -c line notes.txt; cat missing.txt"),
             editor("str_replace", f"{parallel}/notes.txt", old_str="no such text", new_str="x")],
            [tool_use("think", {"thought": "Two lines; missing.txt does not exist."})],
            [editor("create", f"{parallel}/summary.txt", file_text="two lines\n"), terminal("wc -l summary.txt")],
            [finish("Summarised into summary.txt.")],
        ], {"notes.txt": "first line\nsecond line\n", "data/a.txt": "a\n"}),
        "errors": ("Explore the tree and fix the greeting.", [
            [terminal("cd sub && ls -1 && pwd")],
            [terminal("false")],
            [editor("view", "sub/hello.txt")],
            [tool_use("file_editor", {"command": "bogus", "path": f"{errors}/sub/hello.txt"})],
            [tool_use("no_such_tool", {"x": 1})],
            [editor("str_replace", f"{errors}/sub/hello.txt", old_str="helo", new_str="hello")],
            [finish("Fixed.")],
        ], {"sub/hello.txt": "helo world\n"}),
    }


def write_conversation(bundle: Json, target: Path) -> None:
    """The SDK's own layout: base_state.json + events/event-NNNNN-<id>.json (as the SDK names them)."""
    events = target / "events"
    events.mkdir(parents=True)
    (target / "base_state.json").write_text(json.dumps(bundle["base_state"], indent=2) + "\n")
    for index, event in enumerate(bundle["events"]):
        (events / f"event-{index:05d}-{event['id']}.json").write_text(json.dumps(event, indent=2) + "\n")


def record(name: str, task: str, turns: list[list[Block]], files: dict[str, str], python: Path) -> Path:
    workspace = REC_ROOT / name
    target = FIXTURES / VERSION / name
    fresh_copied_scenario(workspace, target, files)
    write_script(target, f"openhands-sdk/{name}", turns)
    with tempfile.TemporaryDirectory(prefix=f"forkpoint-rec-openhands-sdk-{name}-") as tmp:
        scratch = Path(tmp)
        model = ScriptedModel.from_file(target / "script.json", model="scripted")
        with model.serve() as url:
            request = {"schema": "forkpoint.openhands-sdk-runner/v1", "mode": "record", "workspace": str(workspace),
                       "persistence_dir": str(scratch / "conversations"), "tools": TOOLS, "max_iterations": 20,
                       "task": task, "out": str(scratch / "bundle.json"), "result": str(scratch / "result.json"),
                       "llm": {"model": MODEL, "base_url": f"{url}/v1", "api_key_env": "SCRIPTED_API_KEY"}}
            result = run_python_runner([str(python), "-I", str(RUNNER)], request, scratch, name, RUN_TIMEOUT_S,
                                       {"OPENHANDS_SUPPRESS_BANNER": "1",
                                        "TMUX_TMPDIR": str(scratch)},  # no socket left in /tmp
                                       lambda result: str(result.get("traceback")))
        bundle = json.loads((scratch / "bundle.json").read_text())
    write_conversation(bundle, target / "conversation")
    write_requests(target / "requests.jsonl", model.requests, summarise_chat_request)
    meta = {"agent": "openhands-sdk", "version": VERSION, "scenario": name, "cwd": str(workspace), "task": task,
            "model": MODEL, "execution_status": result.get("execution_status"), "runner_mode": "record",
            "recorded_at": datetime.now(UTC).isoformat(timespec="seconds")}
    (target / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(workspace, ignore_errors=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", default=None)
    args = parser.parse_args()
    runtime = runtimes.find("openhands-sdk", VERSION)
    if runtime is None:
        raise SystemExit(f"openhands-sdk {VERSION} is not installed: forkpoint agents install openhands-sdk@{VERSION}")
    table = scenarios(REC_ROOT)
    for name in args.scenario or list(table):
        task, turns, files = table[name]
        print(record(name, task, turns, files, runtime.entrypoint))


if __name__ == "__main__":
    main()
