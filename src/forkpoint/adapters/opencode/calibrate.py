"""OpenCode's calibration probe (forkpoint.adapters.calibrate): one recorded ``opencode run``, its export, a resume.

The session covers the re-record script's tools in five turns (scripts/record_opencode_fixtures.py): parallel
bash, read and write; an edit, glob and grep; a long read and two failing calls (a missing file, an edit whose
text is absent); a long bash output. ``opencode export`` of the session is the recording the checks read (an
event log names no version). The resume is a forkpoint continuation of that export
(kit.calibration.resume_check): the release imports the session rebuilt with the candidate's profile and runs
``--session`` on it; the candidate's gate judges its first request.

A release of a line with its own tool profile (``tool_profile.LINES``: 1.2.x) is replayed under its own version:
its calls re-run with its line's binary (the release itself, installed by the calibration), and the profile is
named in the calibration (``tool_profile``); the resume is still judged as each candidate's.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

from forkpoint.adapters.calibration import Outcome, compact_requests
from forkpoint.adapters.kit.calibration import (
    first_match,
    match_candidates,
    parse_check,
    ran_ok,
    record_check,
    replay_check,
    restore_files,
    resume_check,
    run_release,
)
from forkpoint.adapters.opencode.tool_profile import line_for
from forkpoint.adapters.spec import AgentSpec
from forkpoint.core.errors import trajectory as trajectory_error

TASK = "Probe every tool: read, write, edit, search, run commands."
LONG = "".join(f"line {n:04d} of the long file\n" for n in range(1, 1201))
FILES = {"notes.txt": "hello world\nsecond line\n", "src/app.py": "def main():\n    return 42\n", "big.txt": LONG}
SEED = "opencode/calibrate"
PROVIDER = "scripted"
MODEL = "scripted-model"
#: the calls the script expects OpenCode to record with status "error"
ERRORS = frozenset({"call_cal_8", "call_cal_9"})
MAX_EXPORT_BYTES = 64 * 1024 * 1024


def _turns(cwd: Path) -> list[list[dict[str, Any]]]:
    from forkpoint.testing.scripted_model import text, tool_use

    def bash(command: str, call: str) -> dict[str, Any]:
        return tool_use("bash", {"command": command, "description": "Run a probe command"}, id=call)

    return [[text("Three things at once."), bash("sleep 0.3; echo parallel", "call_cal_1"),
             tool_use("read", {"filePath": f"{cwd}/notes.txt"}, id="call_cal_2"),
             tool_use("write", {"filePath": f"{cwd}/new.txt", "content": "line one\nline two\n"}, id="call_cal_3")],
            [tool_use("edit", {"filePath": f"{cwd}/new.txt", "oldString": "line two", "newString": "line 2"},
                      id="call_cal_4"), tool_use("glob", {"pattern": "**/*.py"}, id="call_cal_5"),
             tool_use("grep", {"pattern": "def main", "include": "*.py"}, id="call_cal_6")],
            [tool_use("read", {"filePath": f"{cwd}/big.txt", "limit": 600}, id="call_cal_7"),
             tool_use("read", {"filePath": f"{cwd}/missing.txt"}, id="call_cal_8"),
             tool_use("edit", {"filePath": f"{cwd}/notes.txt", "oldString": "not there", "newString": "x"},
                      id="call_cal_9")],
            [bash("seq 1 1500 | tail -n 3; cat new.txt", "call_cal_10")],
            [text("Done probing.")]]


def _statuses(export: dict[str, Any]) -> dict[str, str]:
    """Call id -> the tool part's status in the export."""
    found = {}
    for message in export.get("messages") or []:
        for part in message.get("parts") or [] if isinstance(message, dict) else []:
            if isinstance(part, dict) and part.get("type") == "tool":
                state = part.get("state")
                found[str(part.get("callID"))] = str(state.get("status")) if isinstance(state, dict) else "?"
    return found


def _session_id(events: bytes) -> str:
    for raw in events.decode("utf-8", "replace").splitlines():
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if isinstance(event, dict) and isinstance(event.get("sessionID"), str):
            return str(event["sessionID"])
    raise trajectory_error("the release's `run --format=json` printed no sessionID")


def probe(spec: AgentSpec, entrypoint: Path, version: str, candidates: list[str], scratch: Path,
          outcome: Outcome) -> str | None:
    from forkpoint.adapters.kit.ids import check_id
    from forkpoint.adapters.opencode.launch import export_json, run_options
    from forkpoint.adapters.opencode.toolhost import opencode_env, provider_config, write_config
    from forkpoint.core.fs import read_regular_file
    from forkpoint.testing.scripted_model import ScriptedModel

    cwd, home = scratch / "workspace", scratch / "home"
    restore = partial(restore_files, cwd, FILES)
    restore()
    turns = _turns(cwd)
    expected = [[block["id"] for block in turn if block.get("type") == "tool_use"] for turn in turns]
    model = ScriptedModel(turns, seed=SEED, model=MODEL)
    env = opencode_env(home, cwd)
    # its Bun runtime unpacks native libraries (``.<hash>-00000000.so``) and OpenCode its ``opencode/`` folder into
    # TMPDIR: the probe's own, gone with its scratch (the user's /tmp kept them)
    env["TMPDIR"] = str(home / "tmp")
    (home / "tmp").mkdir(parents=True)
    events = scratch / "events.jsonl"
    with model.serve() as url:
        write_config(home, provider_config(PROVIDER, MODEL, f"{url}/v1", "scripted-calibration-key"))
        code, stderr = run_release([str(entrypoint), "run", "--format=json", *run_options(entrypoint), TASK], env, cwd,
                                   "probe session", stdout=events)
    if not ran_ok(outcome, code, stderr):
        return None
    session_id = check_id(_session_id(events.read_bytes()), "session id")
    exported = scratch / "export.out"
    code, stderr = run_release([str(entrypoint), "export", session_id], env, cwd, "export", stdout=exported)
    if not ran_ok(outcome, code, stderr):
        return None
    read = read_regular_file(scratch, exported.name, max_bytes=MAX_EXPORT_BYTES)
    if read.truncated:
        raise trajectory_error("the release's export is larger than 64 MiB")
    export = export_json(read.data)
    data = (json.dumps(export, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    path = scratch / "export.json"
    path.write_bytes(data)
    outcome.evidence.update({"export.json": data, "events.jsonl": events.read_bytes(),
                             "requests.jsonl": compact_requests(model.requests)})
    statuses = _statuses(export)
    missing = [i for ids in expected for i in ids if i not in statuses]
    wrong = [i for ids in expected for i in ids if i in statuses
             and statuses[i] != ("error" if i in ERRORS else "completed")]
    calls = sum(map(len, expected))
    if not record_check(outcome, f"{len(export.get('messages') or [])} exported messages", calls, missing, wrong,
                        "wrong status") or not parse_check(spec, path, version, calls, outcome):
        return None

    def as_candidate(candidate: str) -> bytes:
        info = export.get("info")
        rewritten = {**export, "info": {**info, "version": candidate}} if isinstance(info, dict) else export
        return (json.dumps(rewritten, indent=2, ensure_ascii=False) + "\n").encode("utf-8")

    line = line_for(version)
    if line is None:
        return match_candidates(spec.name, candidates, as_candidate, len(expected) - 1, restore,
                                entrypoint, version, scratch, outcome, name="export.json")
    # a release of a line with its own tool profile (tool_profile.LINES) keeps its version in the replay: its
    # calls re-run with its line's binary whatever continues it (as a recording of it would); only the resume is
    # read as the candidate
    outcome.tool_profile = line.label

    def passes(candidate: str) -> bool:
        tools_ok = replay_check(spec.name, candidate, data, len(expected) - 1, restore, scratch,
                                outcome, name="export.json")
        resumed = resume_check(spec.name, candidate, as_candidate(candidate), 1, restore, entrypoint,
                               version, scratch, outcome, name="export.json", reuse=True)  # as match_candidates
        return resumed and tools_ok

    return first_match(candidates, passes, outcome)
