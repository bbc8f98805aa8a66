"""The OpenHands SDK's calibration probe (forkpoint.adapters.calibrate): one recorded conversation and one resume.

The release runs forkpoint's companion runner in ``record`` mode on its own venv (as
scripts/record_openhands_sdk_fixtures.py does): the SDK's ``Conversation`` with TerminalTool, FileEditorTool and
TaskTrackerTool (plus the SDK's own think and finish), litellm talking Chat Completions to ScriptedModel. The
turns use every tool: parallel calls, a terminal output past the SDK's 30,000-character cut, a failing command, a
refused edit, an unknown tool. The recording is the conversation the SDK persisted (``base_state.json`` and
``events/``), read as forkpoint's bundle of those files.

A persisted conversation names no SDK version, so the parser is expected to find none, and the recording is read
as each candidate without any rewrite. The resume is a forkpoint continuation (kit.calibration.resume_check): the
release's SDK resumes the conversation rebuilt with the candidate's profile, and the candidate's gate judges its
first request. A calibrated SDK release is listed and may continue conversations; the conversations themselves
stay ``unverified`` (nothing in them says which SDK wrote them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forkpoint.adapters.calibration import Check, Outcome, compact_requests
from forkpoint.adapters.kit.calibration import (
    match_candidates,
    only_file,
    parse_check,
    restore_files,
    run_runner,
    runner_env,
    scripted_record_check,
)
from forkpoint.adapters.spec import AgentSpec

TASK = "Look around, plan, fix the greeting and summarise."
FILES = {"notes.txt": "first line\nsecond line\n", "sub/hello.txt": "helo world\n"}
SEED = "openhands-sdk/calibrate"
RUNNER = Path(__file__).resolve().parent / "runner.py"
TOOLS = ["terminal", "file_editor", "task_tracker"]
#: per scripted turn with calls, per call: whether the SDK records it as an error
ERRORS = [[False, False], [False], [False], [False, True], [False], [True], [False, False]]


def _turns(cwd: Path) -> list[list[dict[str, Any]]]:
    from forkpoint.testing.scripted_model import text, tool_use

    def terminal(command: str) -> dict[str, Any]:
        return tool_use("terminal", {"command": command, "security_risk": "LOW"})

    def editor(command: str, path: str, **fields: Any) -> dict[str, Any]:
        return tool_use("file_editor", {"command": command, "path": f"{cwd}/{path}", **fields,
                                        "security_risk": "LOW"})

    return [
        [text("Two things at once."), terminal("ls -1"), editor("view", "notes.txt")],
        [tool_use("task_tracker", {"command": "plan", "task_list": [
            {"title": "fix greeting", "notes": "", "status": "in_progress"},
            {"title": "summarise", "notes": "", "status": "todo"}]})],
        [terminal("seq 1 8000")],  # ~39,000 characters: past the SDK's cut, saved to a file it names
        [terminal("grep -c line notes.txt; cat missing.txt"),
         editor("str_replace", "notes.txt", old_str="no such text", new_str="x")],
        [tool_use("think", {"thought": "missing.txt does not exist; the greeting is misspelt."})],
        [tool_use("no_such_tool", {"x": 1})],
        [editor("str_replace", "sub/hello.txt", old_str="helo", new_str="hello"),
         editor("create", "summary.txt", file_text="fixed\n")],
        [tool_use("finish", {"message": "Fixed and summarised."})],
    ]


def probe(spec: AgentSpec, entrypoint: Path, version: str, candidates: list[str], scratch: Path,
          outcome: Outcome) -> str | None:
    from forkpoint.testing.scripted_model import ScriptedModel

    cwd, home, persisted = scratch / "workspace", scratch / "home", scratch / "conversations"
    restore_files(cwd, FILES)
    home.mkdir()
    turns = _turns(cwd)
    model = ScriptedModel(turns, seed=SEED, model="scripted")
    with model.serve() as url:
        request = {"schema": "forkpoint.openhands-sdk-runner/v1", "mode": "record", "workspace": str(cwd),
                   "persistence_dir": str(persisted), "tools": TOOLS, "max_iterations": 20, "task": TASK,
                   "out": str(scratch / "bundle.json"), "result": str(scratch / "result.json"),
                   "llm": {"model": "openai/scripted", "base_url": f"{url}/v1", "api_key_env": "SCRIPTED_API_KEY"}}
        # the SDK's tmux socket: in the probe's scratch, removed with it
        env = runner_env(home, OPENHANDS_SUPPRESS_BANNER="1", TMUX_TMPDIR=str(home))
        result = run_runner([str(entrypoint), "-I", str(RUNNER)], request, env, scratch, "probe conversation", outcome)
    if result is None:
        return None
    base_state = only_file(sorted(persisted.glob("*/base_state.json")), "conversation (base_state.json)")
    bundle = only_file([scratch / "bundle.json"], "conversation bundle")
    data = bundle.read_bytes()
    outcome.evidence.update({"conversation.json": data, "requests.jsonl": compact_requests(model.requests)})
    status = result.get("execution_status")
    if result.get("error") or result.get("run_error") or status != "finished":
        outcome.checks.append(Check("record", False, f"execution_status {status}; "
                                    f"{result.get('error') or result.get('run_error') or ''}"[:400]))
        outcome.reason = "the probe session did not complete as scripted"
        return None
    events = len(list((base_state.parent / "events").glob("event-*.json")))
    if not scripted_record_check(spec, base_state, ERRORS, outcome, f"execution_status {status}, {events} events") \
            or not parse_check(spec, base_state, None, sum(map(len, ERRORS)), outcome):
        return None
    # no version to rewrite: the conversation reads as every candidate as it is
    return match_candidates(spec.name, candidates, lambda _candidate: data, len(ERRORS),
                            lambda: restore_files(cwd, FILES), entrypoint, version, scratch, outcome,
                            name="conversation.json")
