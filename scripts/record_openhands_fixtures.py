#!/usr/bin/env python3
"""Record REAL OpenHands 0.62.0 runs (V0 controller, CLI runtime) against ScriptedModel as test fixtures.

    python scripts/record_openhands_fixtures.py [--scenario S ...]

Needs the runtime (`forkpoint agents install openhands@0.62.0`). Each scenario runs forkpoint's companion runner
(src/forkpoint/adapters/openhands/runner.py, mode ``record``) on the runtime's Python: OpenHands' own
``run_controller`` with CodeActAgent on the CLI runtime in /tmp/forkpoint-rec-openhands/<scenario> (recreated
fresh from the scenario's initial files), litellm talking OpenAI Chat Completions to ScriptedModel. Writes
tests/fixtures/openhands/0.62.0/<scenario>/: trajectory.json (OpenHands' own ``save_trajectory_path`` output),
requests.jsonl (what the model server received: ``messages`` whole, ``tools`` as a hash + names), script.json,
meta.json and workspace-initial/.

Re-recordings differ only in timestamps, ``llm_metrics`` latencies and the litellm response ids/created stamps
OpenHands stores (ScriptedModel's ids are seeded, so call ids are stable).

The scenarios avoid shell commands made only of builtins (``pwd && exit 3``): the 0.62.0 CLI runtime loses the
whole output of a command that exits before its first ``poll()`` (``_execute_shell_command`` then reads the rest
only ``while line:``, a name never bound), so such a command records an empty output at random.
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
FIXTURES = REPO / "tests" / "fixtures" / "openhands"
REC_ROOT = Path("/tmp/forkpoint-rec-openhands")
RUNNER = REPO / "src" / "forkpoint" / "adapters" / "openhands" / "runner.py"
VERSION = "0.62.0"
MODEL = "openai/scripted"
RUN_TIMEOUT_S = 300.0
Json = dict[str, Any]


def bash(command: str) -> Block:
    return tool_use("execute_bash", {"command": command, "security_risk": "LOW"})


def editor(command: str, path: str, **fields: Any) -> Block:
    return tool_use("str_replace_editor", {"command": command, "path": path, **fields, "security_risk": "LOW"})


def finish(message: str) -> Block:
    return tool_use("finish", {"message": message})


def scenarios(root: Path) -> dict[str, tuple[str, list[list[Block]], dict[str, str]]]:
    """name -> (task, turns, initial files). Paths inside tool calls are absolute (OpenHands requires it)."""
    basic = root / "basic"
    parallel = root / "parallel"
    errors = root / "errors"
    return {
        "basic": ("Create pkg/calc.py with an add() function and make sure add(2, 3) is 5.", [
            [text("I'll create the package first."),
             bash("mkdir -p pkg && printf 'def add(a, b):\\n    return a - b\\n' > pkg/calc.py && echo created")],
            [editor("view", f"{basic}/pkg/calc.py")],
            [text("The operator is wrong."),
             editor("str_replace", f"{basic}/pkg/calc.py", old_str="return a - b", new_str="return a + b")],
            [bash("python3 -c 'import pkg.calc as c; print(c.add(2, 3))'")],
            [finish("add(2, 3) is 5 now.")],
        ], {}),
        "parallel": ("Look at the notes and the listing, then summarise.", [
            [text("Two things at once."), bash("ls -1"), editor("view", f"{parallel}/notes.txt")],
            [bash("grep -c line notes.txt; cat missing.txt")],
            [tool_use("think", {"thought": "The notes have two lines; missing.txt does not exist."})],
            [editor("create", f"{parallel}/summary.txt", file_text="two lines\n"), bash("wc -l summary.txt")],
            [finish("Summarised into summary.txt.")],
        ], {"notes.txt": "first line\nsecond line\n", "data/a.txt": "a\n"}),
        "errors": ("Explore the tree and fix the greeting.", [
            [bash("cd sub && ls -1 && pwd")],
            [bash("ls -1 && exit 3")],
            [editor("str_replace", f"{errors}/sub/hello.txt", old_str="no such text", new_str="x")],
            [editor("str_replace", f"{errors}/sub/hello.txt", old_str="helo", new_str="hello"),
             editor("view", f"{errors}/sub")],
            [finish("Fixed.")],
        ], {"sub/hello.txt": "helo world\n"}),
    }


def record(name: str, task: str, turns: list[list[Block]], files: dict[str, str], python: Path) -> Path:
    workspace = REC_ROOT / name
    target = FIXTURES / VERSION / name
    fresh_copied_scenario(workspace, target, files)
    write_script(target, f"openhands/{name}", turns)
    with tempfile.TemporaryDirectory(prefix=f"forkpoint-rec-openhands-{name}-") as tmp:
        scratch = Path(tmp)
        model = ScriptedModel.from_file(target / "script.json", model="scripted")
        with model.serve() as url:
            request = {"schema": "forkpoint.openhands-runner/v1", "mode": "record", "workspace": str(workspace),
                       "file_store": str(scratch / "file-store"), "sid": f"forkpoint-rec-{name}",
                       "save_trajectory": str(scratch / "trajectory.json"), "max_iterations": 20, "task": task,
                       "llm": {"model": MODEL, "base_url": f"{url}/v1", "api_key_env": "SCRIPTED_API_KEY"},
                       "result": str(scratch / "result.json")}
            result = run_python_runner([str(python), str(RUNNER)], request, scratch, name, RUN_TIMEOUT_S, {})
        trajectory = json.loads((scratch / "trajectory.json").read_text())
    (target / "trajectory.json").write_text(json.dumps(trajectory, indent=4) + "\n")
    write_requests(target / "requests.jsonl", model.requests, summarise_chat_request)
    meta = {"agent": "openhands", "version": VERSION, "scenario": name, "cwd": str(workspace), "task": task,
            "model": MODEL, "agent_state": result.get("agent_state"), "iterations": result.get("iterations"),
            "runner_mode": "record", "recorded_at": datetime.now(UTC).isoformat(timespec="seconds")}
    (target / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    shutil.rmtree(workspace, ignore_errors=True)
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", default=None)
    args = parser.parse_args()
    runtime = runtimes.find("openhands", VERSION)
    if runtime is None:
        raise SystemExit(f"openhands {VERSION} is not installed: forkpoint agents install openhands@{VERSION}")
    table = scenarios(REC_ROOT)
    for name in args.scenario or list(table):
        task, turns, files = table[name]
        print(record(name, task, turns, files, runtime.entrypoint))


if __name__ == "__main__":
    main()
