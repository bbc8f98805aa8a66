"""Claude Code's calibration probe (forkpoint.adapters.calibrate): one recorded session and one ``--resume``.

The session is the re-record scripts' coverage in one run (scripts/record_claude_fixtures.py): parallel Bash and
Read, Write, Edit, a search, a large Bash output and a failing command (no Glob/Grep: a default 2.1.332 run
does not offer them and rejects the call before running it, which a replay cannot re-run). The resume is what a
continuation does (``launch.argv``, ``launch.environment``): the session cut after its first tool results, resumed
with a nonce prompt; its first model request is what the bridge gate checks.
"""

from __future__ import annotations

import json
import os
import secrets
from functools import partial
from pathlib import Path
from typing import Any

from forkpoint.adapters.calibration import Check, Outcome, compact_requests
from forkpoint.adapters.kit.calibration import (
    first_match,
    only_file,
    parse_check,
    ran_ok,
    record_check,
    replay_check,
    restore_files,
)
from forkpoint.adapters.kit.calibration import run_release as _run
from forkpoint.adapters.spec import AgentSpec
from forkpoint.core.errors import trajectory as trajectory_error

TASK = "Probe every tool: read, write, edit, search, run commands."
FILES = {"a.txt": "alpha\n", "b.txt": "beta\nhello there\n", "notes/readme.md": "# notes\nhello\n"}
SEED = "claude-code/calibrate"
MAX_SESSION_BYTES = 64 * 1024 * 1024


def _turns(cwd: Path) -> list[list[dict[str, Any]]]:
    from forkpoint.testing.scripted_model import text, tool_use

    def bash(command: str) -> dict[str, Any]:
        return tool_use("Bash", {"command": command, "description": "Run a probe command"})

    return [[text("Reading both files in parallel."), bash("sleep 1 && cat a.txt"),
             tool_use("Read", {"file_path": f"{cwd}/b.txt"})],
            [tool_use("Write", {"file_path": f"{cwd}/new.txt", "content": "line one\nline two\n"})],
            [tool_use("Edit", {"file_path": f"{cwd}/new.txt", "old_string": "line two", "new_string": "line 2"})],
            [bash("find . -name '*.txt' | sort"), tool_use("Read", {"file_path": f"{cwd}/notes/readme.md"})],
            [bash("seq 1 12000")],
            [bash("ls missing-dir")],
            [text("Done probing.")]]


ERROR_STEPS = frozenset({5})


def _env(home: Path, url: str) -> dict[str, str]:
    """The continuation's environment, with the release's temp files (sockets, shell snapshots) under ``home``:
    removed with the scratch dir, nothing left in the user's /tmp."""
    from forkpoint.adapters.claude_code.launch import environment

    env = environment(os.environ, home, url, "scripted-calibration-key")
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(home / "tmp")
    return env


def _session_file(home: Path, cwd: Path) -> Path:
    from forkpoint.adapters.claude_code.launch import config_dir, project_dir_name

    # 2.0.x from about 2.0.59 on also writes an ``agent-<id>.jsonl`` sidechain transcript per warm-up subagent
    # beside the session (the older-window sweep: "found 3"); the session itself is ``<session id>.jsonl``
    found = sorted(path for path in (config_dir(home) / "projects" / project_dir_name(cwd)).glob("*.jsonl")
                   if not path.name.startswith("agent-"))
    return only_file(found, "session file", MAX_SESSION_BYTES)


def _lines(path: Path) -> list[Any]:
    return [json.loads(raw) for raw in path.read_text("utf-8").splitlines() if raw.strip()]


def _results(lines: list[Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for line in lines:
        content = line.get("message", {}).get("content") if isinstance(line, dict) and line.get("type") == "user" \
            else None
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                found[str(block.get("tool_use_id"))] = block
    return found


def probe(spec: AgentSpec, entrypoint: Path, version: str, candidates: list[str], scratch: Path,
          outcome: Outcome) -> str | None:
    from forkpoint.adapters.claude_code.launch import argv
    from forkpoint.adapters.claude_code.tool_profile import is_v2_0, recorded_profile
    from forkpoint.testing.scripted_model import ScriptedModel

    cwd, home = scratch / "workspace", scratch / "home"
    restore = partial(restore_files, cwd, FILES)
    restore()
    turns = _turns(cwd)
    model = ScriptedModel(turns, seed=SEED)
    expected = [[b["id"] for b in model.respond("main", step)[1] if b["type"] == "tool_use"]
                for step in range(len(turns))]
    record = [str(entrypoint), "-p", TASK, "--output-format", "stream-json", "--verbose",
              "--dangerously-skip-permissions"]
    with model.serve() as url:
        code, stderr = _run(record, _env(home, url), cwd, "probe session")
    if not ran_ok(outcome, code, stderr):
        return None
    session = _session_file(home, cwd)
    outcome.evidence.update({"session.jsonl": session.read_bytes(),
                             "requests.jsonl": compact_requests(model.requests)})
    lines = _lines(session)
    results = _results(lines)
    missing = [i for ids in expected for i in ids if i not in results]
    wrong = [i for step, ids in enumerate(expected) for i in ids
             if i in results and bool(results[i].get("is_error")) != (step in ERROR_STEPS)]
    persisted = (session.parent / session.stem / "tool-results").is_dir()
    large = "persisted to tool-results/" if persisted else "inline"
    calls = sum(map(len, expected))
    if not record_check(outcome, f"{len(lines)} session lines", calls, missing, wrong, more=f", large output {large}") \
            or not parse_check(spec, session, version, calls, outcome):
        return None

    nonce = f"fp-calibrate-{secrets.token_hex(16)}"
    cut, session_id = _cut_after_first_results(lines, expected[0]), session.stem
    body = _resume_request(entrypoint, argv(entrypoint, session_id, nonce, 1), cut, session_id, cwd, scratch,
                           outcome)

    own = recorded_profile(version)
    if own is not None and not is_v2_0(version):
        outcome.tool_profile = own.label  # 2.1.94-2.1.126: named in the report and the calibration

    def passes(candidate: str) -> bool:
        # a release with a measured recorded-version profile (1.0.x, 2.0.x, 2.1.94-2.1.126) keeps its version, so its
        # tools re-run with that profile whatever continues it (tool_profile.recorded_profile): replayed as recorded
        rewritten = lines if own is not None else [
            {**line, "version": candidate} if isinstance(line, dict) and line.get("version") == version else line
            for line in lines]
        tools_ok = replay_check(spec.name, candidate, rewritten, len(expected) - 1, restore, scratch,
                                outcome)
        return _envelope_check(candidate, version, cut, nonce, body, outcome) and tools_ok

    return first_match(candidates, passes, outcome)


def _cut_after_first_results(lines: list[Any], ids: list[str]) -> list[Any]:
    last = max(index for index, line in enumerate(lines) if isinstance(line, dict) and line.get("type") == "user"
               and any(isinstance(b, dict) and b.get("tool_use_id") in ids
                       for b in (line.get("message", {}).get("content") or [])
                       if isinstance(line.get("message", {}).get("content"), list)))
    return lines[:last + 1]


def _resume_request(entrypoint: Path, command: list[str], cut: list[Any], session_id: str, cwd: Path,
                    scratch: Path, outcome: Outcome) -> Any:
    """The release's first main model request when it resumes ``cut`` (its own session, cut as a replay does)."""
    from forkpoint.adapters.claude_code.launch import session_path
    from forkpoint.testing.scripted_model import ScriptedModel, text

    home = scratch / "resume-home"
    path = session_path(home, cwd, session_id)
    path.parent.mkdir(parents=True)
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in cut), "utf-8")
    model = ScriptedModel([[text("Resumed.")]], seed=f"{SEED}/resume")
    with model.serve() as url:
        _run(command, _env(home, url), cwd, "resume")
    outcome.evidence["resume-requests.jsonl"] = compact_requests(model.requests)
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    if not main:
        raise trajectory_error("the release made no model request after --resume")
    return main[0].get("body")


def _envelope_check(candidate: str, release: str, cut: list[Any], nonce: str, body: Any, outcome: Outcome) -> bool:
    """The release's first resumed request against ``candidate``'s prefix, in the form the release sends
    (``envelope.sender_profile``: 2.1.268-2.1.270 their own, every other release the candidate's)."""
    from forkpoint.adapters.claude_code.envelope import expected_prefix, profile_for_version
    from forkpoint.adapters.claude_code.gate import clean_first_request

    expected = expected_prefix(cut, nonce, candidate, sender=release)
    verdict = clean_first_request(expected, body)
    form = "" if expected.profile == profile_for_version(candidate).profile else \
        f" (in the release's own form, {expected.profile})"
    outcome.checks.append(Check("resume_envelope", verdict.ok,
                                f"the gate accepts the first request after --resume{form}" if verdict.ok
                                else f"the gate refuses it{form}: {verdict.reason}", candidate))
    return verdict.ok
