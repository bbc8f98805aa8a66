#!/usr/bin/env python3
"""Re-record the real OpenCode fixtures (tests/fixtures/opencode/<version>/<scenario>/).

For every verified OpenCode version installed in forkpoint's runtime cache and every scenario: start
ScriptedModel (OpenAI Chat Completions over SSE; the only stand-in), write a private HOME/XDG tree with an
``opencode.json`` whose provider ``scripted`` (``@ai-sdk/openai-compatible``) points at it, restore the scenario's
workspace at ``/tmp/forkpoint-rec-opencode/<scenario>`` and run, from there,
``opencode run --format=json --thinking --print-logs "<task>"`` (``run_log``: plain ``opencode run --format=json
"<task>"``, as a user runs it). Then ``opencode export <session>`` writes the session as JSON. Both commands write
their stdout to a FILE: the Bun binary exits without flushing a pipe, so an export over 64 KiB read through a pipe
is cut at 65,536 bytes. Saved per case:

* ``events.jsonl``: the ``run --format=json`` stdout (the native event log); ``stderr.txt`` the logfmt log;
* ``export.json``: ``opencode export`` of the session (the full record: user message, every part);
* ``requests.jsonl``: every request ScriptedModel got (no auth headers; the ``system`` message and ``tools``
  replaced by ``system_sha256`` of the date-masked text and ``tool_names``; the other messages kept whole);
* ``script.json`` (the model script, ``seed`` = ``opencode/<scenario>`` so call ids are equal in both versions),
  ``meta.json`` (version, session id, cwd, command, env, config, exit code) and ``workspace-initial/``.

Usage: ``python scripts/record_opencode_fixtures.py [--version V ...] [--scenario S ...] [--out DIR]``.
The 1.2 line's fixture: ``--version 1.2.6 --scenario old_line`` (``old_line`` runs only when named).
Exits non-zero when a recording does not look right (exit code, missing events, call ids, statuses).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forkpoint import runtimes
from forkpoint.adapters import agent_spec
from forkpoint.adapters.opencode.tool_profile import LINES
from forkpoint.testing.scripted_model import Block, ScriptedModel, text, thinking, tool_use

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "opencode"
WORK_ROOT = Path("/tmp/forkpoint-rec-opencode")
HOME_ROOT = Path("/tmp/forkpoint-rec-opencode-home")
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"
TIMEOUT_S = 180.0
PROVIDER = "scripted"
MODEL = "scripted-model"
DATE_LINE = re.compile(r"Today's date: [^\n]*")

Json = dict[str, Any]


def config(base_url: str, model: str = MODEL) -> Json:
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"{PROVIDER}/{model}",
        "small_model": f"{PROVIDER}/{model}",
        "provider": {PROVIDER: {
            "npm": "@ai-sdk/openai-compatible", "name": "ScriptedModel",
            "options": {"baseURL": f"{base_url}/v1", "apiKey": "dummy"},
            "models": {model: {"name": "Scripted", "tool_call": True, "reasoning": False,
                               "limit": {"context": 128000, "output": 8192}}}}},
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "allow", "external_directory": "allow"},
    }


def environment(home: Path) -> dict[str, str]:
    sink = "http://127.0.0.1:9"  # nothing listens: background fetches (npm plugin install) fail at once
    return {"PATH": CLEAN_PATH, "HOME": str(home), "LANG": "C.UTF-8", "TZ": "UTC",
            "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_CACHE_HOME": str(home / ".cache"), "XDG_STATE_HOME": str(home / ".local" / "state"),
            "OPENCODE_DISABLE_MODELS_FETCH": "1", "OPENCODE_DISABLE_AUTOUPDATE": "1", "OPENCODE_DISABLE_SHARE": "1",
            "HTTP_PROXY": sink, "HTTPS_PROXY": sink, "http_proxy": sink, "https_proxy": sink,
            "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


@dataclass(frozen=True)
class Scenario:
    task: str
    files: dict[str, str]
    turns: list[list[Block]]
    #: per batch (in order): expected tool status per call ("completed" / "error")
    statuses: list[list[str]]
    #: the ``opencode run`` flags after ``--format=json``
    flags: tuple[str, ...] = ("--thinking", "--print-logs")
    #: the model id: one containing ``gpt-`` makes OpenCode offer ``apply_patch`` instead of edit/write
    model: str = MODEL


def ws(scenario: str, name: str) -> str:
    return str(WORK_ROOT / scenario / name)


def bash(command: str) -> Block:
    return tool_use("bash", {"command": command, "description": "Run a command"})


#: 1,200 numbered lines (~36 KB): the long session reads, greps and edits it
LONG_FILE = "".join(f"line {n:04d} of the long session\n" for n in range(1, 1201))


#: a project skill (OpenCode finds ``.opencode/skills/<name>/SKILL.md`` in the project, frontmatter name/description)
SKILL_MD = ("---\nname: release-notes\ndescription: Draft release notes from the changes\n---\n\n"
            "# Release notes\n\nCollect the changes and fill in template.md.\n")


def patch(*lines: str) -> Block:
    return tool_use("apply_patch", {"patchText": "\n".join(("*** Begin Patch", *lines, "*** End Patch"))})


SCENARIOS: dict[str, Scenario] = {
    "apply_patch": Scenario(
        "Patch the notes.", {"notes.txt": "alpha\nbeta\ngamma\n", "old.txt": "to be removed\n",
                             "src/mod.py": "def f():\n    return 1\n"},
        [[tool_use("read", {"filePath": ws("apply_patch", "notes.txt")})],
         [patch("*** Update File: notes.txt", "@@", " alpha", "-beta", "+BETA", " gamma")],
         [patch("*** Add File: added/new.txt", "+first", "+second")],
         [patch("*** Delete File: old.txt")],
         [patch("*** Update File: src/mod.py", "*** Move to: src/moved.py", "@@ def f():", "-    return 1",
                "+    return 2")],
         [patch("*** Update File: notes.txt", "@@", "-not there", "+x")],  # verification fails: an error part
         [patch("*** Update File: " + ws("apply_patch", "notes.txt"), "@@", " alpha", "+inserted")],  # absolute
         [bash("cat notes.txt added/new.txt src/moved.py; ls")],
         [text("Patched.")]],
        [["completed"], ["completed"], ["completed"], ["completed"], ["completed"], ["error"], ["completed"],
         ["completed"]],
        model="gpt-5-scripted",
    ),
    "bash_basic": Scenario(
        "Make hello.txt and show it.", {"README.md": "# demo\n"},
        [[thinking("I will create the file first."), bash("printf 'hello world\\n' > hello.txt && ls")],
         [thinking("Now show it."), bash("cat hello.txt")],
         [text("hello.txt says hello world.")]],
        [["completed"], ["completed"]],
    ),
    "parallel": Scenario(
        "Do several things at once.", {"notes.txt": "alpha\nbeta\n"},
        [[text("Three things at once."), bash("echo parallel"),
          tool_use("read", {"filePath": ws("parallel", "notes.txt")}),
          tool_use("write", {"filePath": ws("parallel", "parallel.txt"), "content": "written in parallel\n"})],
         [bash("cat parallel.txt notes.txt")],
         [text("All done.")]],
        [["completed", "completed", "completed"], ["completed"]],
    ),
    "files": Scenario(
        "Edit the notes.", {"notes.txt": "hello world\nsecond line\n"},
        [[tool_use("read", {"filePath": ws("files", "notes.txt")})],
         [tool_use("edit", {"filePath": ws("files", "notes.txt"), "oldString": "hello world",
                            "newString": "goodbye world"})],
         [tool_use("write", {"filePath": ws("files", "new.txt"), "content": "new file\nline two\n"})],
         [tool_use("read", {"filePath": ws("files", "new.txt"), "offset": 2})],
         [text("The notes are edited.")]],
        [["completed"], ["completed"], ["completed"], ["completed"]],
    ),
    "search": Scenario(
        "Find the main function.", {"src/app.py": "def main():\n    return 42\n", "README.md": "# search demo\n"},
        [[tool_use("glob", {"pattern": "**/*.py"})],
         [tool_use("grep", {"pattern": "def main", "include": "*.py"})],
         [tool_use("read", {"filePath": ws("search", "src")})],
         [text("main is in src/app.py.")]],
        [["completed"], ["completed"], ["completed"]],
    ),
    "stale_tools": Scenario(
        "Plan, then list.", {"notes.txt": "hello\n"},
        [[tool_use("todowrite", {"todos": [{"content": "list the files", "status": "in_progress",
                                            "priority": "high", "id": "1"}]})],
         [tool_use("list", {"path": ws("stale_tools", "")})],
         [bash("cat notes.txt")],
         [text("Listed.")]],
        [["completed"], ["completed"], ["completed"]],
    ),
    "long_session": Scenario(
        "Work through the long file.", {"big.txt": LONG_FILE, "notes.md": "# notes\n"},
        [[thinking("Look at the file first."), bash("wc -l big.txt && head -n 3 big.txt")],
         [bash("nosuchcmd_forkpoint --help")],  # the shell names itself: `<$SHELL or bash on PATH>: line 1: ...`
         [tool_use("read", {"filePath": ws("long_session", "big.txt"), "limit": 400})],
         [bash("sed -n '401,800p' big.txt")],
         [tool_use("edit", {"filePath": ws("long_session", "big.txt"), "oldString": "line 0007 of",
                            "newString": "LINE 0007 of"})],
         [tool_use("read", {"filePath": ws("long_session", "big.txt"), "offset": 801, "limit": 400})],
         [tool_use("grep", {"pattern": "line 01[0-9][0-9] of", "include": "*.txt"})],
         [bash("tail -n 400 big.txt | tr a-z A-Z")],
         [tool_use("write", {"filePath": ws("long_session", "summary.md"), "content": "1200 lines, one edited\n"}),
          tool_use("glob", {"pattern": "*.md"})],
         [bash("wc -c big.txt notes.md summary.md")],
         [text("The long file is summarised in summary.md.")]],
        [["completed"], ["completed"], ["completed"], ["completed"], ["completed"], ["completed"], ["completed"],
         ["completed"], ["completed", "completed"], ["completed"]],
    ),
    "run_log": Scenario(
        "Check the notes, as a user would run it.", {"notes.txt": "alpha\nbeta\n"},
        [[thinking("Several things at once."), text("Reading and listing."), bash("ls && nosuchcmd_forkpoint"),
          tool_use("read", {"filePath": ws("run_log", "notes.txt")})],
         [thinking("Now change it."), tool_use("edit", {"filePath": ws("run_log", "notes.txt"), "oldString": "beta",
                                                        "newString": "gamma"})],
         [bash("cat notes.txt")],
         [text("notes.txt now says alpha, gamma.")]],
        [["completed", "completed"], ["completed"], ["completed"]],
        flags=(),
    ),
    # recorded with 1.2.6 only (``--version 1.2.6 --scenario old_line``): the texts its tool profile differs in
    "old_line": Scenario(
        "Read, search and fail on the 1.2 line.",
        {"notes.txt": "hello world\nsecond line\n", "src/app.py": "def main():\n    return 42\n",
         "big.txt": "".join(f"row {n:03d}\n" for n in range(1, 301))},
        [[tool_use("read", {"filePath": ws("old_line", "notes.txt")}),
          tool_use("grep", {"pattern": "def main", "include": "*.py"})],
         [tool_use("read", {"filePath": ws("old_line", "big.txt"), "offset": 101, "limit": 50}),
          tool_use("glob", {"pattern": "**/*.py"})],
         [tool_use("read", {"filePath": ws("old_line", "missing.txt")}),
          tool_use("edit", {"filePath": ws("old_line", "notes.txt"), "oldString": "not there", "newString": "x"})],
         [tool_use("edit", {"filePath": ws("old_line", "notes.txt"), "oldString": "second line",
                            "newString": "2nd line"}),
          tool_use("write", {"filePath": ws("old_line", "out.txt"), "content": "written\n"})],
         [bash("cat notes.txt out.txt; exit 2")],
         [text("Done on the old line.")]],
        [["completed", "completed"], ["completed", "completed"], ["error", "error"], ["completed", "completed"],
         ["completed"]],
    ),
    "skill": Scenario(
        "Use the release skill.", {".opencode/skills/release-notes/SKILL.md": SKILL_MD,
                                   ".opencode/skills/release-notes/template.md": "## Changes\n",
                                   "notes.txt": "v1\n"},
        [[tool_use("skill", {"name": "release-notes"})],
         [tool_use("skill", {"name": "no-such-skill"})],  # OpenCode's not-found error (lists what it has)
         [bash("cat notes.txt")],
         [text("Release notes drafted.")]],
        [["completed"], ["error"], ["completed"]],
    ),
    "errors": Scenario(
        "Show me the failures.", {"notes.txt": "hello\n"},
        [[bash("echo out; echo err >&2; exit 3")],
         [tool_use("read", {"filePath": ws("errors", "missing.txt")})],
         [tool_use("edit", {"filePath": ws("errors", "notes.txt"), "oldString": "not there", "newString": "x"})],
         [text("Three failures shown.")]],
        [["completed"], ["error"], ["error"]],
    ),
}


def sha256_text(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def scrub(body: Any) -> Any:
    """System prompt and tools become hashes (the date line masked); the conversation is kept whole."""
    if not isinstance(body, dict):
        return body
    out = dict(body)
    messages = out.get("messages")
    if isinstance(messages, list) and messages and isinstance(messages[0], dict) \
            and messages[0].get("role") == "system" and isinstance(messages[0].get("content"), str):
        system = messages[0]["content"]
        out["messages"] = [{"role": "system", "system_sha256": sha256_text(DATE_LINE.sub("Today's date: <DATE>",
                                                                                         system))},
                           *messages[1:]]
    if "tools" in out:
        tools = out.pop("tools")
        out["tools_sha256"] = hashlib.sha256(json.dumps(tools, sort_keys=True).encode()).hexdigest()
        out["tool_names"] = [t.get("function", {}).get("name") for t in tools if isinstance(t, dict)]
    return out


def run(binary: Path, args: list[str], cwd: Path, home: Path, out: Path) -> subprocess.CompletedProcess[bytes]:
    """Run to completion with stdout and stderr on files in ``out`` (never a pipe: Bun exits before flushing one)."""
    stdout_path, stderr_path = out / ".stdout", out / ".stderr"
    with stdout_path.open("xb") as stdout, stderr_path.open("xb") as stderr:
        proc = subprocess.Popen([str(binary), *args], cwd=cwd, env=environment(home), stdin=subprocess.DEVNULL,
                                stdout=stdout, stderr=stderr, start_new_session=True)
        try:
            proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise SystemExit(f"opencode {' '.join(args[:2])} did not finish within {TIMEOUT_S:.0f} s") from None
    done = subprocess.CompletedProcess(proc.args, proc.returncode, stdout_path.read_bytes(), stderr_path.read_bytes())
    stdout_path.unlink()
    stderr_path.unlink()
    return done


def record(version: str, name: str, out_root: Path) -> list[str]:
    runtime = runtimes.find("opencode", version)
    if runtime is None:
        return [f"opencode {version} is not installed (forkpoint agents install opencode@{version})"]
    scenario = SCENARIOS[name]
    cwd, home = WORK_ROOT / name, HOME_ROOT / version / name
    for path in (cwd, home):
        shutil.rmtree(path, ignore_errors=True)
    for rel, content in scenario.files.items():
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        (cwd / rel).write_text(content, "utf-8")
    out = out_root / version / name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    shutil.copytree(cwd, out / "workspace-initial")
    script = {"seed": f"opencode/{name}", "turns": [{"content": turn} for turn in scenario.turns]}
    (out / "script.json").write_text(json.dumps(script, indent=2) + "\n", "utf-8")
    model = ScriptedModel.from_file(out / "script.json")
    args = ["run", "--format=json", *scenario.flags, scenario.task]
    with model.serve() as url:
        settings = config(url, scenario.model)
        (home / ".config" / "opencode").mkdir(parents=True)
        (home / ".config" / "opencode" / "opencode.json").write_text(json.dumps(settings, indent=2), "utf-8")
        done = run(runtime.entrypoint, args, cwd, home, out)
    (out / "events.jsonl").write_bytes(done.stdout)
    (out / "stderr.txt").write_bytes(done.stderr)
    events = [json.loads(line) for line in done.stdout.decode().splitlines() if line.strip()]
    session_id = next((e.get("sessionID") for e in events if e.get("sessionID")), None)
    problems = [] if done.returncode == 0 else [f"exit {done.returncode}: {done.stderr.decode()[-800:]}"]
    if session_id:
        exported = run(runtime.entrypoint, ["export", session_id], cwd, home, out)
        text_out = exported.stdout.decode()
        start = text_out.find("{")  # 1.17 prints "Exporting session: ..." before the JSON
        (out / "export.json").write_text(json.dumps(json.loads(text_out[start:]), indent=2) + "\n", "utf-8")
    else:
        problems.append("no sessionID in the events")
    with (out / "requests.jsonl").open("w", encoding="utf-8") as handle:
        for entry in model.requests:
            handle.write(json.dumps({**entry, "body": scrub(entry["body"])}, ensure_ascii=False) + "\n")
    meta = {"version": version, "scenario": name, "session_id": session_id, "cwd": str(cwd), "home": str(home),
            "command": ["opencode", *args], "env": {k: v for k, v in environment(home).items()},
            "config": {**settings, "provider": {PROVIDER: {**settings["provider"][PROVIDER],
                                                           "options": {"baseURL": "<ScriptedModel>/v1",
                                                                       "apiKey": "dummy"}}}},
            "exit_code": done.returncode}
    (out / "meta.json").write_text(json.dumps(meta, indent=2) + "\n", "utf-8")
    exported = json.loads((out / "export.json").read_text("utf-8")) if (out / "export.json").is_file() else {}
    return problems + check(exported, scenario)


def check(export: Json, scenario: Scenario) -> list[str]:
    """The tool statuses of each assistant message in the export (1.2 prints no event for a failed call)."""
    problems = []
    steps: list[list[str]] = []
    for message in export.get("messages") or []:
        statuses = [part.get("state", {}).get("status") for part in message.get("parts") or []
                    if part.get("type") == "tool"]
        if statuses:
            steps.append(sorted(statuses))
    want = [sorted(s) for s in scenario.statuses]
    if steps != want:
        problems.append(f"tool statuses per step {steps}, expected {want}")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # a verified version, or the measured release of a line with its own tool profile (1.2.6)
    parser.add_argument("--version", action="append",
                        choices=(*agent_spec("opencode").versions, *(line.measured for line in LINES)))
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    options = parser.parse_args()
    failures = 0
    for version in options.version or tuple(agent_spec("opencode").versions):
        for name in options.scenario or sorted(set(SCENARIOS) - {"old_line"}):
            problems = record(version, name, options.out)
            print(f"{version} {name}: {'ok' if not problems else '; '.join(problems)}")
            failures += bool(problems)
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
