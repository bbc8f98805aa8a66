"""Pi's calibration probe (forkpoint.adapters.calibrate): one recorded ``pi --mode json`` run and one resume.

The session covers Pi's default tools as the re-record script does (scripts/record_pi_fixtures.py): parallel
read, read and bash, a write, an edit, a large read (Pi truncates it), a long bash output and two failing calls
(a missing file, a non-zero exit). A bash output over Pi's 2,000-line limit is not probed: its text names a temp
file of the full output, a path no replay reproduces. Pi's session file names no Pi version, so the parse check
asks only that the file reads with every call; a session whose own answers pick a measured tool profile (0.85's
``write`` wording, ``tools.PROFILE_0_85``) is replayed with it and the calibration names it. The resume is a
forkpoint continuation of that session (kit.calibration.resume_check): the release's own SDK, through forkpoint's
runner, resumes a session rebuilt with the candidate's profile, and the candidate's gate judges its first request.
"""

from __future__ import annotations

import json
import os
from functools import partial
from pathlib import Path
from typing import Any

from forkpoint.adapters.calibration import Outcome, compact_requests
from forkpoint.adapters.kit.calibration import (
    match_candidates,
    only_file,
    parse_check,
    ran_ok,
    record_check,
    restore_files,
    run_release,
)
from forkpoint.adapters.spec import AgentSpec

TASK = "Probe every tool: read, write, edit, run commands."
FILES = {"a.txt": "apple\ncherry\n", "b.txt": "banana\ncherry\n", "notes.md": "# notes\nhello\n",
         "big.log": "".join(f"line {i:04d}: status ok\n" for i in range(1, 3001))}
SEED = "pi/calibrate"
PROVIDER = "scripted"
MODEL = "scripted-model"
MAX_SESSION_BYTES = 64 * 1024 * 1024
#: the calls the script expects Pi to answer with isError
ERRORS = frozenset({"call_cal_6", "call_cal_7"})


def _turns() -> list[list[dict[str, Any]]]:
    from forkpoint.testing.scripted_model import text, tool_use

    return [[text("Reading both files in parallel."), tool_use("read", {"path": "a.txt"}, id="call_cal_1"),
             tool_use("read", {"path": "b.txt"}, id="call_cal_2"),
             tool_use("bash", {"command": "sleep 0.3; cat a.txt b.txt | sort -u"}, id="call_cal_3")],
            [tool_use("write", {"path": "c.txt", "content": "line one\nline two\n"}, id="call_cal_4")],
            [tool_use("edit", {"path": "c.txt", "edits": [{"oldText": "line two", "newText": "line 2"}]},
                      id="call_cal_5")],
            [tool_use("read", {"path": "missing.txt"}, id="call_cal_6"),
             tool_use("bash", {"command": "echo checking; echo broken >&2; exit 3"}, id="call_cal_7")],
            [tool_use("read", {"path": "big.log"}, id="call_cal_8"), tool_use("bash", {"command": "seq 1 1500"},
                                                                              id="call_cal_9")],
            [text("Done probing.")]]


def _env(home: Path) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "TZ": "UTC", "PI_OFFLINE": "1", "TMPDIR": str(home / "tmp")}
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    return env


def _session_file(home: Path) -> Path:
    from forkpoint.adapters.pi.launch import agent_dir

    return only_file(sorted((agent_dir(home) / "sessions").glob("*/*.jsonl")), "session file", MAX_SESSION_BYTES)


def _results(lines: list[Any]) -> dict[str, bool]:
    """Call id -> isError of every tool result in the session."""
    found = {}
    for line in lines:
        message = line.get("message") if isinstance(line, dict) and line.get("type") == "message" else None
        if isinstance(message, dict) and message.get("role") == "toolResult":
            found[str(message.get("toolCallId"))] = bool(message.get("isError"))
    return found


def probe(spec: AgentSpec, entrypoint: Path, version: str, candidates: list[str], scratch: Path,
          outcome: Outcome) -> str | None:
    from forkpoint.adapters.pi.launch import agent_dir, models_json
    from forkpoint.testing.scripted_model import ScriptedModel

    cwd, home = scratch / "workspace", scratch / "home"
    restore = partial(restore_files, cwd, FILES)
    restore()
    turns = _turns()
    expected = [[block["id"] for block in turn if block.get("type") == "tool_use"] for turn in turns]
    model = ScriptedModel(turns, seed=SEED, model=MODEL)
    command = [str(entrypoint), "--mode", "json", "--provider", PROVIDER, "--model", MODEL, TASK]
    with model.serve() as url:
        agent_dir(home).mkdir(parents=True)
        settings = models_json(url, PROVIDER, MODEL)
        settings["providers"][PROVIDER]["apiKey"] = "scripted-calibration-key"
        (agent_dir(home) / "models.json").write_text(json.dumps(settings), "utf-8")
        code, stderr = run_release(command, _env(home), cwd, "probe session")
    if not ran_ok(outcome, code, stderr):
        return None
    session = _session_file(home)
    outcome.evidence.update({"session.jsonl": session.read_bytes(),
                             "requests.jsonl": compact_requests(model.requests)})
    data = session.read_bytes()
    lines = [json.loads(raw) for raw in data.decode("utf-8").splitlines() if raw.strip()]
    results = _results(lines)
    missing = [i for ids in expected for i in ids if i not in results]
    wrong = [i for ids in expected for i in ids if i in results and results[i] != (i in ERRORS)]
    calls = sum(map(len, expected))
    # Pi's session names no Pi version: the parse check asks for none
    if not record_check(outcome, f"{len(lines)} session lines", calls, missing, wrong) \
            or not parse_check(spec, session, None, calls, outcome):
        return None

    found = match_candidates(spec.name, candidates, lambda candidate: data, len(expected) - 1, restore,
                             entrypoint, version, scratch, outcome, name="session.jsonl")
    if found is not None:
        # the measured profile its tools re-ran with, when its own answers chose one (0.85's write wording)
        from forkpoint.adapters.pi.parse import parse_pi
        from forkpoint.adapters.pi.tools import profile_for

        recorded = (call for batch in parse_pi(session).batches for call in batch.calls)
        outcome.tool_profile = profile_for(found, recorded).label
    return found
