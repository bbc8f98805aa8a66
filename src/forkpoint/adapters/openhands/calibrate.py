"""OpenHands V0's calibration probe (forkpoint.adapters.calibrate): one recorded run and one resume.

The release runs forkpoint's companion runner in ``record`` mode on its own venv (as
scripts/record_openhands_fixtures.py does): OpenHands' ``run_controller`` with CodeActAgent on the CLI runtime,
litellm talking Chat Completions to ScriptedModel. The turns use every tool CodeActAgent has here (execute_bash,
str_replace_editor, think, finish): parallel calls, a large output, a failing command, a refused edit. The
recording is the trajectory OpenHands saved (``save_trajectory_path``), whose system event names the version.

The resume is a forkpoint continuation (kit.calibration.resume_check): the release's runner replays the prefix
rebuilt with the candidate's profile through its ReplayManager, answered with the fresh observations, then asks
the model; the candidate's gate judges that first request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from forkpoint.adapters.calibration import Check, Outcome, compact_requests
from forkpoint.adapters.kit.calibration import (
    match_candidates,
    only_file,
    parse_check,
    restore_files,
    run_release,
    run_runner,
    runner_env,
    scripted_record_check,
)
from forkpoint.adapters.spec import AgentSpec

TASK = "Look around, fix the greeting and summarise."
FILES = {"notes.txt": "first line\nsecond line\n", "sub/hello.txt": "helo world\n"}
SEED = "openhands/calibrate"
RUNNER = Path(__file__).resolve().parent / "runner.py"
#: per scripted turn with calls, per call: V0 observations carry no error flag (an error is in the text)
ERRORS = [[False, False], [False], [False, False], [False], [False, False]]
#: the V0 agent loop the runner drives; openhands-ai releases after V0's removal (1.11.0) no longer ship it
V0_MODULE = "openhands.core.main"
#: exits 4 when the release's Python has no V0 module (it or a parent package is missing; the parents are imported,
#: not the module); any other failure (a dependency that does not import) is left to the runner to report
HAS_V0 = ("import importlib.util, sys\nname = sys.argv[1]\ntry:\n"
          "    found = importlib.util.find_spec(name) is not None\nexcept ModuleNotFoundError as error:\n"
          "    found = not (error.name == name or name.startswith(f'{error.name}.'))\nsys.exit(0 if found else 4)")
NO_V0 = "the release is not OpenHands V0"


def _turns(cwd: Path) -> list[list[dict[str, Any]]]:
    from forkpoint.testing.scripted_model import text, tool_use

    def bash(command: str) -> dict[str, Any]:
        # the CLI runtime loses the whole output of a command that ends before its first poll() (a race the
        # loaded machine loses: ``seq 1 8000`` recorded empty once): each command starts with a short sleep
        return tool_use("execute_bash", {"command": f"sleep 0.3; {command}", "security_risk": "LOW"})

    def editor(command: str, path: str, **fields: Any) -> dict[str, Any]:
        return tool_use("str_replace_editor", {"command": command, "path": f"{cwd}/{path}", **fields,
                                               "security_risk": "LOW"})

    return [
        [text("Two things at once."), bash("ls -1"), editor("view", "notes.txt")],
        [bash("seq 1 8000")],  # ~39,000 characters: past OpenHands' observation cut
        [bash("grep -c line notes.txt; cat missing.txt"),
         editor("str_replace", "notes.txt", old_str="no such text", new_str="x")],
        [tool_use("think", {"thought": "missing.txt does not exist; the greeting is misspelt."})],
        [editor("str_replace", "sub/hello.txt", old_str="helo", new_str="hello"),
         editor("create", "summary.txt", file_text="fixed\n")],
        [tool_use("finish", {"message": "Fixed and summarised."})],
    ]


def as_candidate(data: bytes, candidate: str) -> bytes:
    """The trajectory with its system event naming ``candidate`` (the version replay and the gate key on)."""
    events = json.loads(data)
    for event in events if isinstance(events, list) else []:
        if isinstance(event, dict) and event.get("action") == "system" and isinstance(event.get("args"), dict):
            event["args"]["openhands_version"] = candidate
    return (json.dumps(events, indent=4) + "\n").encode("utf-8")


def has_v0(entrypoint: Path, home: Path, scratch: Path) -> bool:
    """Whether the release's Python has V0's agent loop (``V0_MODULE``): an openhands-ai release without it is
    another agent, a named difference, not a probe that crashed."""
    code, _ = run_release([str(entrypoint), "-I", "-c", HAS_V0, V0_MODULE], runner_env(home), scratch,
                          "V0 module check")
    return code != 4


def probe(spec: AgentSpec, entrypoint: Path, version: str, candidates: list[str], scratch: Path,
          outcome: Outcome) -> str | None:
    from forkpoint.testing.scripted_model import ScriptedModel

    cwd, home = scratch / "workspace", scratch / "home"
    restore_files(cwd, FILES)
    home.mkdir()
    if not has_v0(entrypoint, home, scratch):
        outcome.checks.append(Check("release", False, f"openhands-ai {version} has no `{V0_MODULE}`: V0's agent "
                                    "loop (run_controller, CodeActAgent, the CLI runtime) is not in the release, "
                                    "so it cannot write a V0 trajectory or continue one"))
        outcome.reason = NO_V0
        return None
    model = ScriptedModel(_turns(cwd), seed=SEED, model="scripted")
    saved = scratch / "trajectory.json"
    with model.serve() as url:
        request = {"schema": "forkpoint.openhands-runner/v1", "mode": "record", "workspace": str(cwd),
                   "file_store": str(scratch / "file-store"), "sid": "forkpoint-calibrate",
                   "save_trajectory": str(saved), "max_iterations": 20, "task": TASK,
                   "llm": {"model": "openai/scripted", "base_url": f"{url}/v1", "api_key_env": "SCRIPTED_API_KEY"},
                   "result": str(scratch / "result.json")}
        result = run_runner([str(entrypoint), str(RUNNER)], request, runner_env(home), scratch, "probe run", outcome)
    if result is None:
        return None
    data = only_file([saved], "trajectory").read_bytes()
    outcome.evidence.update({"trajectory.json": data, "requests.jsonl": compact_requests(model.requests)})
    state = result.get("agent_state")
    if result.get("error") or state != "finished":
        outcome.checks.append(Check("record", False, f"agent_state {state}; "
                                    f"{result.get('error') or result.get('last_error') or ''}"[:400]))
        outcome.reason = "the probe session did not complete as scripted"
        return None
    events = json.loads(data)
    if not scripted_record_check(spec, saved, ERRORS, outcome, f"agent_state {state}, {len(events)} events") \
            or not parse_check(spec, saved, version, sum(map(len, ERRORS)), outcome):
        return None
    return match_candidates(spec.name, candidates, lambda candidate: as_candidate(data, candidate), len(ERRORS),
                            lambda: restore_files(cwd, FILES), entrypoint, version, scratch, outcome,
                            name="trajectory.json")
