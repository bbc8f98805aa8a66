#!/usr/bin/env python3
"""Record REAL Claude Agent SDK sessions (Python ``claude-agent-sdk`` driving a verified Claude Code binary) against
ScriptedModel as test fixtures.

    pip install --target /tmp/agentsdk claude-agent-sdk==0.2.184      # not a forkpoint dependency
    PYTHONPATH=$PWD/src:/tmp/agentsdk python scripts/record_claude_agent_sdk_fixtures.py [--version V] [--scenario S]

Writes tests/fixtures/claude_code/<version>/<scenario>/ with the same files as scripts/record_claude_fixtures.py
(session.jsonl, <session-id>/subagents/, requests.jsonl, script.json, meta.json, workspace-initial/), plus
``messages.jsonl`` (the SDK's messages, one per line) and, for a forked session, ``origin.jsonl`` (the session it was
forked from). The SDK is given forkpoint's installed runtime (``cli_path``), so the bundled binary is never used.

Scenarios: ``sdk_query`` (one ``query()`` with the SDK's default empty system prompt: Bash, Read), ``sdk_resume`` (a
second ``query(resume=ID)`` appends to the first session; the ``claude_code`` preset with an appended line),
``sdk_fork`` (``resume=ID, fork_session=True``: a new session file whose history is copied from the first),
``sdk_subagents`` (``agents={"writer": AgentDefinition(...)}``: a code-defined sub-agent writes a file).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fixture_recording import fresh_scenario, installed, read_jsonl, write_requests, write_script
from record_claude_fixtures import (
    CLEAN_PATH,
    FIXTURES,
    HOME_ROOT,
    REC_ROOT,
    Json,
    Turns,
    _result_texts,
    bash,
    compact_request,
    encode_cwd,
    task,
)

from forkpoint import runtimes
from forkpoint.testing.scripted_model import ScriptedModel, text, tool_use

VERSIONS = ("2.1.220", "2.1.332")
#: a phrase only the code-defined sub-agent's system prompt has (its AgentDefinition.prompt)
WRITER_KEY = "You are the writer sub-agent of the forkpoint SDK fixture."


@dataclass(frozen=True)
class Query:
    """One ``query()`` call: its prompt and the ClaudeAgentOptions fields beyond the common ones."""

    prompt: str
    options: dict[str, Any] = field(default_factory=dict)
    resume_first: bool = False  # resume the session the first query made
    fork: bool = False


@dataclass(frozen=True)
class SdkScenario:
    name: str
    files: dict[str, str | bytes]
    queries: list[Query]
    turns: Callable[[str], Turns]
    sub_turns: Callable[[str], Turns] | None = None
    check: Callable[[list[Json], Path], None] | None = None
    notes: str = ""


def _check_query(lines: list[Json], _: Path) -> None:
    assert _result_texts(lines)[1].startswith("1\tsdk notes"), _result_texts(lines)


def _check_resume(lines: list[Json], _: Path) -> None:
    results = _result_texts(lines)
    assert results == ["one", "one\ntwo"], results


def _check_fork(lines: list[Json], fixture: Path) -> None:
    results = _result_texts(lines)
    assert results == ["one", "one\nforked"], results
    assert (fixture / "origin.jsonl").is_file()


def _check_subagents(lines: list[Json], fixture: Path) -> None:
    results = _result_texts(lines)
    assert results[-1] == "written by the writer", results
    assert len(list(fixture.glob("*/subagents/*.jsonl"))) == 1


PRESET_APPEND = {"type": "preset", "preset": "claude_code", "append": "Answer tersely."}

SCENARIOS: dict[str, SdkScenario] = {s.name: s for s in [
    SdkScenario(
        "sdk_query", {"notes.txt": "sdk notes\n"},
        [Query("List the files, then read notes.txt.")],
        lambda cwd: [[text("Listing."), bash("ls", "List files")],
                     [tool_use("Read", {"file_path": f"{cwd}/notes.txt"})],
                     [text("notes.txt says sdk notes.")]],
        check=_check_query,
        notes="query() with the SDK's defaults: an empty system prompt (--system-prompt ''), stream-json input",
    ),
    SdkScenario(
        "sdk_resume", {"README.md": "# demo\n"},
        [Query("Write one to log.txt.", {"system_prompt": PRESET_APPEND}),
         Query("Now append two.", {"system_prompt": PRESET_APPEND}, resume_first=True)],
        lambda cwd: [[bash("echo one > log.txt && cat log.txt", "Write one")],
                     [text("Wrote one.")],
                     [bash("echo two >> log.txt && cat log.txt", "Append two")],
                     [text("Appended two.")]],
        check=_check_resume,
        notes="two query() calls, the second with resume=<first session id>: one session file, two prompts; the "
              "claude_code system prompt preset with an appended line (--append-system-prompt)",
    ),
    SdkScenario(
        "sdk_fork", {"README.md": "# demo\n"},
        [Query("Write one to log.txt."),
         Query("Append forked.", resume_first=True, fork=True)],
        lambda cwd: [[bash("echo one > log.txt && cat log.txt", "Write one")],
                     [text("Wrote one.")],
                     [bash("echo forked >> log.txt && cat log.txt", "Append forked")],
                     [text("Appended forked.")]],
        check=_check_fork,
        notes="resume=<first session id>, fork_session=True: a NEW session file (session.jsonl) whose first records "
              "are copied from the original (origin.jsonl) under the new session id",
    ),
    SdkScenario(
        "sdk_subagents", {"base.txt": "base\n"},
        [Query("Have the writer sub-agent write out.txt, then check it.", {
            "agents": "WRITER", "system_prompt": {"type": "preset", "preset": "claude_code"}})],
        lambda cwd: [task("Agent", description="Write out.txt", subagent_type="writer", run_in_background=False,
                          prompt="Write out.txt and report."),
                     [bash("cat out.txt", "Check the result")],
                     [text("The writer wrote out.txt.")]],
        sub_turns=lambda cwd: [[tool_use("Bash", {"command": "echo 'written by the writer' > out.txt",
                                                  "description": "Write out.txt"}, id="toolu_sdksub_0001")],
                               [tool_use("Read", {"file_path": f"{cwd}/base.txt"}, id="toolu_sdksub_0002")],
                               [text("Writer report: out.txt written.")]],
        check=_check_subagents,
        notes="a sub-agent defined in code (agents={'writer': AgentDefinition(tools=['Bash', 'Read'])}, sent in the "
              "SDK's initialize request, not on the command line); its transcript is <session-id>/subagents/",
    ),
]}


async def _run_query(sdk: Any, options: Any, prompt: str, messages: list[Json]) -> str:
    """One query(); returns the session id of its result message."""
    session_id = ""
    async for message in sdk.query(prompt=prompt, options=options):
        row = dataclasses.asdict(message) if dataclasses.is_dataclass(message) else {"repr": repr(message)}
        messages.append({"class": type(message).__name__, **row})
        if type(message).__name__ == "ResultMessage":
            session_id = message.session_id
    return session_id


def record(version: str, scenario: SdkScenario) -> Path:
    import claude_agent_sdk as sdk

    runtime = installed("claude-code", version)
    cwd, home = REC_ROOT / scenario.name, HOME_ROOT / scenario.name
    fixture = FIXTURES / version / scenario.name
    fresh_scenario(cwd, home, fixture, scenario.files)
    seed = f"claude-code/{scenario.name}"
    turns = scenario.turns(str(cwd))
    write_script(fixture, seed, turns)
    keyed = {WRITER_KEY: scenario.sub_turns(str(cwd))} if scenario.sub_turns is not None else {}
    model = ScriptedModel(turns, seed=seed, keyed=keyed)
    writer = sdk.AgentDefinition(description="Writes files when asked.", prompt=WRITER_KEY + " Do what you are told.",
                                 tools=["Bash", "Read"])
    expected = [[b["id"] for b in model.respond("main", step)[1] if b["type"] == "tool_use"]
                for step in range(len(turns))]
    messages: list[Json] = []
    session_ids: list[str] = []
    # the SDK starts claude with os.environ + options.env: nothing of the recording machine's environment goes in
    os.environ.clear()
    with model.serve() as url:
        env = {"PATH": CLEAN_PATH, "HOME": str(home), "LANG": "C.UTF-8", "TZ": "UTC", "ANTHROPIC_BASE_URL": url,
               "ANTHROPIC_API_KEY": "dummy", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1", "IS_SANDBOX": "1"}
        for query in scenario.queries:
            extra = dict(query.options)
            if extra.get("agents") == "WRITER":
                extra["agents"] = {"writer": writer}
            if query.resume_first:
                extra["resume"] = session_ids[0]
            options = sdk.ClaudeAgentOptions(cli_path=str(runtime.entrypoint), cwd=str(cwd), env=env,
                                             permission_mode="bypassPermissions", fork_session=query.fork, **extra)
            session_ids.append(asyncio.run(_run_query(sdk, options, query.prompt, messages)))
    project = home / ".claude" / "projects" / encode_cwd(cwd)
    final_id = session_ids[-1]
    session = project / f"{final_id}.jsonl"
    shutil.copyfile(session, fixture / "session.jsonl")
    if final_id != session_ids[0]:
        shutil.copyfile(project / f"{session_ids[0]}.jsonl", fixture / "origin.jsonl")
    subagents = project / final_id / "subagents"
    if subagents.is_dir():
        shutil.copytree(subagents, fixture / final_id / "subagents")
    write_requests(fixture / "requests.jsonl", model.requests, compact_request)
    with (fixture / "messages.jsonl").open("w") as handle:
        for row in messages:
            handle.write(json.dumps(row, ensure_ascii=False, default=str) + "\n")
    meta = {
        "agent": "claude-code", "version": version, "probed_version": runtimes.probe_version(runtime),
        "scenario": scenario.name, "session_id": final_id, "session_ids": session_ids, "cwd": str(cwd),
        "home": str(home), "session_path": str(session.relative_to(home)),
        "sdk": {"package": "claude-agent-sdk", "version": sdk.__version__},
        "queries": [{"prompt": q.prompt, "options": {k: v for k, v in q.options.items()},
                     "resume_first": q.resume_first, "fork_session": q.fork} for q in scenario.queries],
        "env": {**env, "ANTHROPIC_BASE_URL": "<scripted model url>"},
        "exit_code": 0, "killed": False, "hand_cut": False, "expected_tool_ids": expected,
        "notes": scenario.notes,
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
    (fixture / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    lines = read_jsonl(fixture / "session.jsonl")
    last = [line for line in lines if line.get("type") == "assistant"][-1]
    assert last["message"]["stop_reason"] == "end_turn", last
    if scenario.check:
        scenario.check(lines, fixture)
    return fixture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="append", choices=VERSIONS)
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    args = parser.parse_args()
    failed = []
    for version in args.version or VERSIONS:
        for name in args.scenario or list(SCENARIOS):
            try:
                fixture = record(version, SCENARIOS[name])
                print(f"ok   {version} {name}: {len(read_jsonl(fixture / 'session.jsonl'))} lines")
            except (AssertionError, RuntimeError, OSError) as error:
                failed.append(f"{version}/{name}")
                print(f"FAIL {version} {name}: {error!r}", file=sys.stderr)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
