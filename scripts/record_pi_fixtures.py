#!/usr/bin/env python3
"""Record REAL Pi runs (the npm package on its Node 22 runtime) against ScriptedModel as test fixtures.

    python scripts/record_pi_fixtures.py [--version 0.83.0|1.6.0] [--scenario S ...]

Needs `forkpoint agents install pi@VERSION` (a verified version; 0.85.1, recorded for the scenarios with a
``write`` only, is installed by `forkpoint agents calibrate pi@0.85.1`). Writes tests/fixtures/pi/<version>/<scenario>/:
events.jsonl (the `pi --mode json` event stream), session.jsonl (the v3 session file Pi wrote), stderr.txt,
requests.jsonl (what the
model server received; the system prompt and tools as hashes), script.json, meta.json and workspace-initial/.

Pi talks to ScriptedModel through an ``openai-completions`` provider named ``scripted`` (models.json below). The
recording cwd (/tmp/forkpoint-rec-pi/<scenario>) and HOME (/tmp/forkpoint-rec-pi-home/<scenario>) are fixed and
recreated fresh, and call ids are seeded per scenario, so re-recordings differ only in the session uuid, entry
ids and timestamps.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forkpoint import runtimes
from forkpoint.testing.scripted_model import Block, ScriptedModel, text, thinking, tool_use

REPO = Path(__file__).resolve().parent.parent
#: the verified versions, and 0.85.1: a release whose own tool profile (tools.PROFILE_0_85) is checked on its writes
VERSIONS = ("0.83.0", "0.85.1", "1.6.0")
FIXTURES_ROOT = REPO / "tests" / "fixtures" / "pi"
REC_ROOT = Path("/tmp/forkpoint-rec-pi")
HOME_ROOT = Path("/tmp/forkpoint-rec-pi-home")
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"
RUN_TIMEOUT_S = 180.0
PROVIDER = "scripted"
MODEL = "scripted-model"

Json = dict[str, Any]
COMPACTION_SETTINGS = {"compaction": {"enabled": True, "reserveTokens": 20, "keepRecentTokens": 10}}


def models_json(base_url: str, context_window: int = 128000) -> Json:
    """The same provider settings forkpoint's continuation writes (adapters/pi/launch.models_json); a compaction
    scenario shrinks the context window so Pi compacts."""
    return {"providers": {PROVIDER: {
        "baseUrl": base_url + "/v1", "api": "openai-completions", "apiKey": "dummy",
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": MODEL, "name": MODEL, "reasoning": False, "contextWindow": context_window,
                    "maxTokens": 8192}],
    }}}


@dataclass(frozen=True)
class Scenario:
    name: str
    task: str
    files: dict[str, str]
    turns: list[list[Block]]
    notes: str = ""
    expect_errors: dict[str, bool] = field(default_factory=dict)  # call id -> isError the recording must show
    tools: str | None = None  # Pi's --tools allowlist (None: Pi's defaults read,bash,edit,write)
    expect_texts: dict[str, str] = field(default_factory=dict)  # call id -> text its result must contain
    #: Pi compacts: a 150-token context window, ``settings.json`` compaction on (reserve 20, keep 10 tokens); Pi
    #: summarises through the model (ScriptedModel's helper answer, the request has no tools)
    compaction: bool = False
    #: a second run, ``pi --continue TASK`` on the same session, with these turns (its own ScriptedModel)
    then: tuple[str, list[list[Block]]] | None = None
    versions: tuple[str, ...] = ("0.83.0", "1.6.0")  # the versions the scenario is recorded on


def _bash(command: str, call_id: str) -> Block:
    return tool_use("bash", {"command": command}, id=call_id)


SCENARIOS = [
    Scenario(
        "single_bash", "Look at the notes and count their lines.",
        {"notes.txt": "first note\nsecond note\n", "src/app.py": "print('hello')\n"},
        [[thinking("I will list the files first."), _bash("ls && cat notes.txt", "call_sb_1")],
         [_bash("wc -l notes.txt", "call_sb_2")],
         [text("notes.txt has 2 lines.")]],
        expect_errors={"call_sb_1": False, "call_sb_2": False},
    ),
    Scenario(
        "parallel", "Compare a.txt and b.txt, then write the union to c.txt.",
        {"a.txt": "apple\ncherry\n", "b.txt": "banana\ncherry\n"},
        [[thinking("Read both files at once."), tool_use("read", {"path": "a.txt"}, id="call_par_1"),
          tool_use("read", {"path": "b.txt"}, id="call_par_2"),
          _bash("sleep 0.3; cat a.txt b.txt | sort -u", "call_par_3")],
         [tool_use("write", {"path": "c.txt", "content": "apple\nbanana\ncherry\n"}, id="call_par_4")],
         [text("c.txt holds the union.")]],
        notes="batch 1 has three parallel calls; the bash call sleeps so the reads finish first (tool_execution_end "
              "in completion order, toolResults in call order)",
        versions=("0.83.0", "0.85.1", "1.6.0"),
    ),
    Scenario(
        "file_tools", "Create greeting.txt, then change hello to goodbye.",
        {"README.md": "# file tools\n"},
        [[tool_use("write", {"path": "greeting.txt", "content": "hello world\nsecond line\n"}, id="call_ft_1")],
         [tool_use("read", {"path": "greeting.txt"}, id="call_ft_2")],
         [tool_use("edit", {"path": "greeting.txt", "edits": [{"oldText": "hello", "newText": "goodbye"}]},
                   id="call_ft_3")],
         [tool_use("read", {"path": "greeting.txt", "offset": 2, "limit": 1}, id="call_ft_4")],
         [text("greeting.txt now says goodbye.")]],
        versions=("0.83.0", "0.85.1", "1.6.0"),
    ),
    Scenario(
        "error_result", "Inspect the missing config and run the checker.",
        {"README.md": "# errors\n"},
        [[tool_use("read", {"path": "missing.txt"}, id="call_err_1"),
          _bash("echo checking; echo broken >&2; exit 3", "call_err_2")],
         [tool_use("edit", {"path": "README.md", "edits": [{"oldText": "no such text", "newText": "x"}]},
                   id="call_err_3")],
         [tool_use("read", {}, id="call_err_4")],
         [text("The checks failed.")]],
        expect_errors={"call_err_1": True, "call_err_2": True, "call_err_3": True, "call_err_4": True},
        notes="a missing file, a non-zero exit (isError in Pi), an edit whose text is absent, a validation failure",
    ),
    Scenario(
        "unknown_tool", "Find the python files.",
        {"main.py": "print(1)\n"},
        [[tool_use("glob", {"pattern": "*.py"}, id="call_unk_1")],
         [_bash("ls *.py", "call_unk_2")],
         [text("main.py is the only python file.")]],
        expect_errors={"call_unk_1": True},
        notes="Pi answers a call to a tool it does not have with 'Tool glob not found' (isError); forkpoint "
              "reproduces that answer",
    ),
    Scenario(
        "unknown_tools", "Run the checks and track them.",
        {"check.sh": "echo all good\n"},
        [[tool_use("Bash", {"command": "sh check.sh"}, id="call_ut_1"),
          tool_use("todowrite", {"todos": [{"content": "run checks", "status": "pending"}]}, id="call_ut_2")],
         [tool_use("grep", {"pattern": "good"}, id="call_ut_3")],
         [tool_use("run_checks", {"all": True}, id="call_ut_4")],
         [_bash("sh check.sh", "call_ut_5")],
         [text("The checks pass.")]],
        expect_errors={"call_ut_1": True, "call_ut_2": True, "call_ut_3": True, "call_ut_4": True,
                       "call_ut_5": False},
        expect_texts={"call_ut_1": "Tool Bash not found", "call_ut_2": "Tool todowrite not found",
                      "call_ut_3": "Tool grep not found", "call_ut_4": "Tool run_checks not found"},
        notes="a wrong-case name (Bash), another agent's tool (todowrite), an optional built-in that is off by "
              "default (grep) and a hallucinated name: Pi's loop answers each 'Tool <name> not found' (isError)",
    ),
    Scenario(
        "optional_tools", "Find where main is defined and list the project.",
        {"src/app.py": "def main():\n    return helper()\n\n\ndef helper():\n    return 42\n",
         "src/data.json": "{\"answer\": 42}\n", "docs/notes.md": "# notes\nmain calls helper\n",
         "README.md": "# optional tools\n"},
        [[tool_use("grep", {"pattern": "def ", "path": "src/app.py"}, id="call_opt_1"),
          tool_use("find", {"pattern": "*.py"}, id="call_opt_2")],
         [tool_use("ls", {}, id="call_opt_3"), tool_use("ls", {"path": "src"}, id="call_opt_4")],
         [tool_use("grep", {"pattern": "helper", "path": "docs", "ignoreCase": True}, id="call_opt_5"),
          tool_use("find", {"pattern": "*.rs"}, id="call_opt_6"),
          tool_use("find", {"pattern": "*.md"}, id="call_opt_10")],
         [tool_use("grep", {"pattern": "(", "path": "src/app.py"}, id="call_opt_7"),
          tool_use("ls", {"path": "missing"}, id="call_opt_8"),
          tool_use("find", {"pattern": "src/*.json", "path": "."}, id="call_opt_11")],
         [tool_use("edit", {"path": "src/app.py", "edits": [{"oldText": "42", "newText": "43"}]}, id="call_opt_9")],
         [text("main is in src/app.py.")]],
        tools="read,bash,edit,write,grep,find,ls",
        expect_errors={"call_opt_1": False, "call_opt_2": False, "call_opt_3": False, "call_opt_8": True,
                       "call_opt_10": False, "call_opt_11": False},
        expect_texts={"call_opt_1": "app.py:1: def main():", "call_opt_2": "src/app.py",
                      "call_opt_4": "app.py", "call_opt_6": "No files found matching pattern",
                      "call_opt_10": "docs/notes.md", "call_opt_11": "src/data.json"},
        notes="pi --tools read,bash,edit,write,grep,find,ls: grep (ripgrep from PATH), find and ls ran. find needs "
              "fd >= 9 (it passes --no-require-git; Debian 12's fd-find 8.6 rejects that flag) and offline Pi "
              "cannot download its own: forkpoint's fd runtime (Debian trixie's fd-find 10.2.0 through its own "
              "loader, forkpoint.runtimes.fd) was first on PATH. Every grep matches within one file: rg searches "
              "several files in parallel and Pi does not sort its output, so a multi-file order is not "
              "reproducible; find's two-file answer (*.md) is fd's own sorted order (fd sorts what it finds "
              "within its first 100 ms)",
    ),
    Scenario(
        "long_session", "Summarise the big log, then record the summary and fix a line.",
        {"big.log": "".join(f"line {i:04d}: status ok, value {i * 7 % 1000:03d}\n" for i in range(1, 3001)),
         "README.md": "# long session\n"},
        [[tool_use("read", {"path": "big.log"}, id="call_long_1")],
         [tool_use("read", {"path": "big.log", "offset": 2990}, id="call_long_2"),
          _bash("grep -c 'status ok' big.log", "call_long_3")],
         [tool_use("write", {"path": "summary.md", "content": "# summary\n3000 lines, all ok\n"}, id="call_long_4")],
         [tool_use("edit", {"path": "big.log", "edits": [
             {"oldText": "line 1500: status ok", "newText": "line 1500: status fixed"}]}, id="call_long_5"),
          tool_use("edit", {"path": "summary.md", "edits": [{"oldText": "all ok", "newText": "one fixed"}]},
                   id="call_long_6")],
         [tool_use("read", {"path": "big.log", "offset": 1499, "limit": 3}, id="call_long_7")],
         [text("Summary written and line 1500 fixed.")]],
        expect_errors={"call_long_1": False, "call_long_5": False},
        expect_texts={"call_long_1": "line 0001: status ok", "call_long_7": "line 1500: status fixed"},
        notes="a read of a 3,000-line file: Pi truncates it and repeats the text in details.truncation, so the "
              "tool runner's reply is over 64 KiB (it used to be cut in the pipe)",
    ),
    Scenario(
        "compaction", "Read a.txt and check it.",
        {"a.txt": "apple\ncherry\n"},
        [[tool_use("read", {"path": "a.txt"}, id="call_cmp_1")],
         [_bash("grep -c e a.txt", "call_cmp_2")],
         [text("a.txt has 2 lines with e.")]],
        compaction=True,
        then=("Now write the count to count.txt.",
              [[tool_use("write", {"path": "count.txt", "content": "2\n"}, id="call_cmp_3")],
               [text("count.txt written.")]]),
        expect_errors={"call_cmp_1": False, "call_cmp_2": False, "call_cmp_3": False},
        versions=("1.6.0",),
        notes="Pi 1.6.0 compacts (a 150-token window): after batch 2 (the summary keeps batch 2, a split turn) and "
              "after batch 3 of the second run (pi --continue); the session holds two compaction entries",
    ),
]


def _hash(value: Any) -> str:
    return "sha256:" + hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def _request_line(entry: Json) -> Json:
    body = dict(entry.get("body") or {})
    messages = body.get("messages") or []
    if messages and messages[0].get("role") in ("system", "developer"):
        messages = [{**messages[0], "content": _hash(messages[0].get("content"))}, *messages[1:]]
    body["messages"] = messages
    if "tools" in body:
        body["tools"] = _hash(body["tools"])
    return {"path": entry.get("path"), "step": entry.get("step"), "body": body}


def record(scenario: Scenario, entrypoint: Path, version: str) -> Path:
    cwd = REC_ROOT / scenario.name
    home = HOME_ROOT / scenario.name
    for directory in (cwd, home):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
    for rel, content in scenario.files.items():
        (cwd / rel).parent.mkdir(parents=True, exist_ok=True)
        (cwd / rel).write_text(content, "utf-8")
    out = FIXTURES_ROOT / version / scenario.name
    shutil.rmtree(out, ignore_errors=True)
    shutil.copytree(cwd, out / "workspace-initial")
    env = {"PATH": CLEAN_PATH, "HOME": str(home), "LANG": "C.UTF-8", "TZ": "UTC", "PI_OFFLINE": "1"}
    if "find" in (scenario.tools or "").split(","):
        # find runs fd >= 9: forkpoint's fd runtime (Debian trixie's fd-find, installed with Pi) first on PATH,
        # as forkpoint's replay and continuation put it
        env["PATH"] = f"{runtimes.install_tool('fd')}:{CLEAN_PATH}"
    tools = ["--tools", scenario.tools] if scenario.tools else []
    command = [str(entrypoint), "--mode", "json", "--provider", PROVIDER, "--model", MODEL, *tools, scenario.task]
    window = 150 if scenario.compaction else 128000
    agent_dir = home / ".pi" / "agent"
    agent_dir.mkdir(parents=True)
    if scenario.compaction:
        (agent_dir / "settings.json").write_text(json.dumps(COMPACTION_SETTINGS), "utf-8")
    runs = [(command, scenario.turns, "")]
    if scenario.then is not None:  # counted from 0 again: the second run's answers are its own script
        runs.append(([*command[:-1], "--continue", scenario.then[0]], scenario.then[1], "-2"))
    stdout, stderr, requests = b"", b"", []
    for argv, turns, suffix in runs:
        model = ScriptedModel(turns, seed=f"pi-{scenario.name}{suffix}", model=MODEL,
                              step_mode="counter" if scenario.then else "conversation")
        with model.serve() as url:
            (agent_dir / "models.json").write_text(json.dumps(models_json(url, window), indent=2), "utf-8")
            done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, stdin=subprocess.DEVNULL,
                                  timeout=RUN_TIMEOUT_S, check=False)
        if done.returncode != 0:
            raise SystemExit(f"{scenario.name}: pi exited {done.returncode}: {done.stderr.decode()[-2000:]}")
        stdout, stderr, requests = stdout + done.stdout, stderr + done.stderr, [*requests, *model.requests]
    sessions = sorted((agent_dir / "sessions").glob("*/*.jsonl"))
    if len(sessions) != 1:
        raise SystemExit(f"{scenario.name}: expected one session file, found {sessions}")
    (out / "events.jsonl").write_bytes(stdout)
    (out / "stderr.txt").write_bytes(stderr)
    shutil.copy2(sessions[0], out / "session.jsonl")
    (out / "requests.jsonl").write_text("".join(json.dumps(_request_line(e), ensure_ascii=False) + "\n"
                                                for e in requests), "utf-8")
    turns = [*scenario.turns, *(scenario.then[1] if scenario.then else [])]
    (out / "script.json").write_text(json.dumps({"seed": f"pi-{scenario.name}", "turns": [
        {"content": turn} for turn in turns]}, indent=2, ensure_ascii=False) + "\n", "utf-8")
    _check(scenario, stdout)
    if scenario.compaction and b'"type":"compaction"' not in (out / "session.jsonl").read_bytes():
        raise SystemExit(f"{scenario.name}: Pi did not compact")
    meta = {
        "agent": "pi", "version": version, "probed_version": runtimes.probe_version(_runtime(version)),
        "scenario": scenario.name, "cwd": str(cwd), "home": str(home),
        "session_file": str(sessions[0].relative_to(home)), "command": ["pi", *command[1:]], "stdin": "/dev/null",
        "env": {**env}, "models_json": models_json("<scripted model url>", window), "exit_code": done.returncode,
        "settings_json": COMPACTION_SETTINGS if scenario.compaction else None,
        "continued_with": ["pi", *runs[1][0][1:]] if len(runs) > 1 else None,
        "notes": scenario.notes, "recorded_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", "utf-8")
    return out


def _check(scenario: Scenario, stdout: bytes) -> None:
    """The recording must show what the scenario is about (every call ran, the expected error flags)."""
    results: dict[str, bool] = {}
    texts: dict[str, str] = {}
    for raw in stdout.splitlines():
        event = json.loads(raw)
        if event.get("type") == "turn_end":
            for result in event.get("toolResults") or []:
                results[result["toolCallId"]] = bool(result.get("isError"))
                texts[result["toolCallId"]] = "".join(str(b.get("text", "")) for b in result.get("content") or [])
    turns = [*scenario.turns, *(scenario.then[1] if scenario.then else [])]
    wanted = [b["id"] for turn in turns for b in turn if b.get("type") == "tool_use"]
    if sorted(results) != sorted(wanted):
        raise SystemExit(f"{scenario.name}: results for {sorted(results)}, expected {sorted(wanted)}")
    for call_id, is_error in scenario.expect_errors.items():
        if results[call_id] != is_error:
            raise SystemExit(f"{scenario.name}: {call_id} isError={results[call_id]}, expected {is_error}")
    for call_id, wanted_text in scenario.expect_texts.items():
        if wanted_text not in texts[call_id]:
            raise SystemExit(f"{scenario.name}: {call_id} result {texts[call_id][:300]!r} lacks {wanted_text!r}")


def _runtime(version: str) -> runtimes.Runtime:
    runtime = runtimes.find("pi", version)
    if runtime is None:
        raise SystemExit(f"pi {version} is not installed: run `forkpoint agents install pi@{version}`")
    return runtime


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", action="append", choices=[s.name for s in SCENARIOS])
    parser.add_argument("--version", choices=VERSIONS, default=VERSIONS[-1])
    args = parser.parse_args(argv)
    entrypoint = _runtime(args.version).entrypoint
    for scenario in SCENARIOS:
        if (args.scenario and scenario.name not in args.scenario) or args.version not in scenario.versions:
            continue
        print(f"recorded {record(scenario, entrypoint, args.version)}", file=sys.stderr)


if __name__ == "__main__":
    main()
