#!/usr/bin/env python3
"""Record REAL Codex CLI sessions (verified native binaries) against ScriptedModel as test fixtures.

    python scripts/record_codex_fixtures.py [--version V ...] [--scenario S ...]

Writes tests/fixtures/codex/<version>/<scenario>/: rollout.jsonl (the native rollout), stdout.jsonl
(`codex exec --json`), stderr.txt, requests.jsonl (what the model server received; `instructions`/`tools` as
hashes), script.json, meta.json and workspace-initial/.

The recording cwd (/tmp/forkpoint-rec-codex/<scenario>) and HOME (/tmp/forkpoint-rec-codex-home/<scenario>,
CODEX_HOME = HOME/.codex) are fixed and recreated fresh, and call ids are seeded per scenario, so
re-recordings differ only in thread/turn/item uuids, timestamps, Chunk IDs and wall times.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from fixture_recording import fresh_scenario, installed, read_jsonl, write_requests, write_script

from forkpoint import runtimes
from forkpoint.adapters import agent_spec
from forkpoint.testing.scripted_model import Block, ScriptedModel, custom_tool_call, text, tool_use

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "codex"
REC_ROOT = Path("/tmp/forkpoint-rec-codex")
HOME_ROOT = Path("/tmp/forkpoint-rec-codex-home")
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"
RUN_TIMEOUT_S = 180.0
MODEL = "gpt-5.5"  # known to both versions; an unknown model name made 0.171 drop apply_patch
API_KEY_ENV = "SCRIPTED_API_KEY"

Json = dict[str, Any]
Turns = list[list[Block]]

CONFIG_TOML = f"""model = "{MODEL}"
model_provider = "scripted"

[model_providers.scripted]
name = "ScriptedModel"
base_url = "{{base_url}}"
wire_api = "responses"
env_key = "{API_KEY_ENV}"
request_max_retries = 0
stream_max_retries = 0

[features]
plugins = false
remote_plugin = false
apps = false
"""


def exec_command(cmd: str) -> Block:
    return tool_use("exec_command", {"cmd": cmd})


class SessionModel(ScriptedModel):
    """ScriptedModel whose ``write_stdin`` calls name the process sessions Codex announced: ``"session_id": "$N"``
    becomes the N-th (1-based) ``Process running with session ID <id>`` seen in the request (Codex picks the id at
    random, so a fixed script cannot know it)."""

    _seen: list[int]

    def select_responses(self, body: dict[str, Any]) -> tuple[str, int | None]:
        outputs = [item.get("output") for item in body.get("input") or [] if isinstance(item, dict)
                   and item.get("type") == "function_call_output"]
        found = [int(m) for o in outputs if isinstance(o, str)
                 for m in re.findall(r"Process running with session ID (\d+)", o)]
        self._seen = list(dict.fromkeys(found))
        return super().select_responses(body)

    def respond_responses(self, kind: str, step: int | None) -> tuple[str, list[Block]]:
        rid, items = super().respond_responses(kind, step)
        for item in items:
            if item.get("name") == "write_stdin":
                args = json.loads(item["arguments"])
                ref = args.get("session_id")
                if isinstance(ref, str) and ref.startswith("$"):
                    seen = getattr(self, "_seen", [])
                    index = int(ref[1:]) - 1
                    args["session_id"] = seen[index] if index < len(seen) else 0
                    item["arguments"] = json.dumps(args)
        return rid, items


def resolve_sessions(fixture: Path) -> None:
    """Rewrite script.json's ``"$N"`` session references to the ids this recording's Codex drew, so the script
    replays (and continues) as a plain ScriptedModel."""
    seen: list[int] = []
    for line in read_jsonl(fixture / "rollout.jsonl"):
        output = line.get("payload", {}).get("output")
        if line.get("type") == "response_item" and isinstance(output, str):
            for found in re.findall(r"Process running with session ID (\d+)", output):
                if int(found) not in seen:
                    seen.append(int(found))
    script = json.loads((fixture / "script.json").read_text("utf-8"))
    for turn in script["turns"]:
        for block in turn["content"]:
            ref = block.get("input", {}).get("session_id") if isinstance(block.get("input"), dict) else None
            if isinstance(ref, str) and ref.startswith("$"):
                block["input"]["session_id"] = seen[int(ref[1:]) - 1]
    (fixture / "script.json").write_text(json.dumps(script, indent=2) + "\n")


def apply_patch(patch: str) -> Block:
    return custom_tool_call("apply_patch", patch)


@dataclass(frozen=True)
class Scenario:
    name: str
    task: str
    files: dict[str, str | bytes]
    turns: Callable[[str], Turns]  # cwd -> scripted assistant turns
    exit_codes: dict[int, int]  # step -> the exit code every exec_command output of that step must report
    versions: tuple[str, ...] = ()  # empty = every verified version
    check: Callable[[list[Json]], None] | None = None
    notes: str = ""
    model: type[ScriptedModel] = ScriptedModel


def _outputs(lines: list[Json]) -> dict[str, str]:
    return {p["call_id"]: p["output"] for p in _items(lines)
            if p.get("type") in ("function_call_output", "custom_tool_call_output")}


def _items(lines: list[Json]) -> list[Json]:
    return [line["payload"] for line in lines if line.get("type") == "response_item"]


def _check_parallel(lines: list[Json]) -> None:
    items = [(p["type"], p.get("call_id")) for p in _items(lines) if "call" in p.get("type", "")]
    kinds = [k for k, _ in items]
    assert kinds[:4] == ["function_call", "function_call", "function_call_output", "function_call_output"], items
    assert [c for _, c in items[:2]] == [c for _, c in items[2:4]], f"outputs not in call order: {items}"
    outputs = list(_outputs(lines).values())
    assert outputs[0].endswith("Output:\nalpha\n") and outputs[1].endswith("Output:\nbeta\n"), outputs


def _check_apply_patch(lines: list[Json]) -> None:
    outputs = list(_outputs(lines).values())
    assert outputs[0] == ("Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated the following files:\n"
                          "A hello.txt\n"), outputs[0]
    assert outputs[1].endswith("Output:\nhello from the patch\n"), outputs[1]


def _check_error(lines: list[Json]) -> None:
    output = next(iter(_outputs(lines).values()))
    assert "No such file or directory" in output, output


def _check_shell_040(lines: list[Json]) -> None:
    outputs = [json.loads(o) for o in list(_outputs(lines).values())[:3]]
    assert outputs[0]["output"] == "alpha\n" and outputs[1]["output"] == "beta\n", outputs[:2]
    assert outputs[2]["metadata"]["exit_code"] == 2, outputs[2]


def _check_plan(lines: list[Json]) -> None:
    assert list(_outputs(lines).values()) == ["Plan updated"], _outputs(lines)


def shell(command: list[str], **extra: Any) -> Block:
    return tool_use("shell", {"command": command, **extra})


def png(width: int, height: int) -> bytes:
    """A small RGB PNG (a gradient) built with zlib only, so the fixture needs no image library."""
    rows = b"".join(b"\x00" + bytes((x * 7 + y * 3) % 256 for x in range(width) for _ in range(3))
                    for y in range(height))
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def jpeg_grey() -> bytes:
    """An 8x8 mid-grey baseline JPEG (one component, DC-only, one-code Huffman tables) built by hand: no image
    library on the recording machine, and every decoder reads it."""
    def segment(marker: int, data: bytes) -> bytes:
        return struct.pack(">BBH", 0xFF, marker, len(data) + 2) + data
    quant = segment(0xDB, b"\x00" + b"\x01" * 64)
    frame = segment(0xC0, struct.pack(">BHHB", 8, 8, 8, 1) + b"\x01\x11\x00")
    one_code = b"\x01" + b"\x00" * 15 + b"\x00"  # one code of length 1 for symbol 0 (DC: diff 0; AC: EOB)
    tables = segment(0xC4, b"\x00" + one_code + b"\x10" + one_code)
    scan = segment(0xDA, b"\x01\x01\x00\x00\x3f\x00")
    return b"\xff\xd8" + quant + frame + tables + scan + b"\x3f" + b"\xff\xd9"


def _view_image_files() -> dict[str, str | bytes]:
    """The view_image scenarios' workspace (new and 0.40's view_image see the same files)."""
    return {"small.png": png(3, 2), "photo.jpg": jpeg_grey(), "notes.txt": "not an image\n", "pics/keep.txt": "x\n",
            "big.png": png(2100, 40)}


def _view_image_turns(cwd: str) -> Turns:
    return [[tool_use("view_image", {"path": "small.png"})],
            [tool_use("view_image", {"path": f"{cwd}/photo.jpg"})],
            [tool_use("view_image", {"path": "missing.png"})],
            [tool_use("view_image", {"path": "notes.txt"})],
            [tool_use("view_image", {"path": "pics"})],
            [tool_use("view_image", {"path": "big.png"})],
            [text("I looked at the pictures.")]]


PLAN = {"explanation": "Two small steps.",
        "plan": [{"step": "Inspect notes.txt", "status": "completed"},
                 {"step": "Summarise it", "status": "in_progress"}]}

SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario(
        "exec_basic", "List the files here, then show notes.txt and summarise it.",
        {"notes.txt": "hello from notes\nsecond line\n", "src/app.py": "print('hi')\n"},
        lambda cwd: [[text("I'll list the files first."), exec_command("ls")],
                     [exec_command("cat notes.txt")],
                     [text("notes.txt says hello and has a second line.")]],
        exit_codes={0: 0, 1: 0},
    ),
    Scenario(
        "parallel", "Show the contents of a.txt and b.txt.",
        {"a.txt": "alpha\n", "b.txt": "beta\n"},
        lambda cwd: [[text("Reading both files in parallel."), exec_command("sleep 1 && cat a.txt"),
                      exec_command("cat b.txt")],
                     [text("a.txt has alpha, b.txt has beta.")]],
        exit_codes={0: 0}, check=_check_parallel,
        notes="call 1 sleeps 1 s, so call 2 finishes first: item_completed events in completion order, "
              "function_call_outputs in call order",
    ),
    Scenario(
        "apply_patch", "Create hello.txt and show it.",
        {"README.md": "# demo\n"},
        lambda cwd: [[apply_patch("*** Begin Patch\n*** Add File: hello.txt\n+hello from the patch\n*** End Patch\n")],
                     [exec_command("cat hello.txt")],
                     [text("hello.txt now says hello from the patch.")]],
        exit_codes={1: 0}, check=_check_apply_patch,
        notes="apply_patch is a freeform custom tool: custom_tool_call / custom_tool_call_output",
    ),
    Scenario(
        "error_exit", "Look into missing-dir.",
        {"README.md": "# demo\n"},
        lambda cwd: [[exec_command("ls missing-dir")],
                     [text("missing-dir does not exist.")]],
        exit_codes={0: 2}, check=_check_error,
    ),
    Scenario(
        "unified_exec", "Run the slow command, then talk to cat.",
        {"README.md": "# demo\n"},
        lambda cwd: [[tool_use("exec_command", {"cmd": "sleep 1; echo done", "yield_time_ms": 250})],
                     [tool_use("write_stdin", {"session_id": "$1", "chars": "", "yield_time_ms": 5000})],
                     [tool_use("exec_command", {"cmd": "echo start; cat", "tty": True, "yield_time_ms": 500})],
                     [tool_use("write_stdin", {"session_id": "$2", "chars": "hello\n", "yield_time_ms": 500})],
                     [tool_use("write_stdin", {"session_id": "$2", "chars": "", "yield_time_ms": 250})],
                     [tool_use("write_stdin", {"session_id": "$2", "chars": "\u0004", "yield_time_ms": 2000})],
                     [tool_use("write_stdin", {"session_id": 999999, "chars": ""})],
                     [tool_use("exec_command", {"cmd": "printf a; sleep 0.6; printf b; sleep 0.6; printf c",
                                                "yield_time_ms": 250})],
                     [tool_use("write_stdin", {"session_id": "$3", "chars": "", "yield_time_ms": 250})],
                     [tool_use("write_stdin", {"session_id": "$3", "chars": "x", "yield_time_ms": 3000})],
                     [tool_use("exec_command", {"cmd": "sleep 1.5; echo slept", "yield_time_ms": 250})],
                     [tool_use("write_stdin", {"session_id": "$4", "chars": "x\n", "yield_time_ms": 3000})],
                     [text("done and cat echoed hello.")]],
        exit_codes={}, model=SessionModel,
        notes="unified exec process sessions: exec_command yields with the process running, write_stdin polls "
              "(empty chars) and types into a tty; a write to an unknown session id; chars to a non-tty process",
    ),
    Scenario(
        "update_plan", "Plan how to summarise notes.txt.",
        {"notes.txt": "hello from notes\n"},
        lambda cwd: [[tool_use("update_plan", PLAN)],
                     [text("The plan is in place.")]],
        exit_codes={}, versions=("0.149.0",), check=_check_plan,
        notes="update_plan exists in 0.149 only (0.171 answers `unsupported call: update_plan`)",
    ),
    Scenario(
        "view_image", "Look at the pictures here.",
        _view_image_files(), _view_image_turns,
        exit_codes={},
        notes="view_image: a small PNG, a JPEG by absolute path, a missing file, a text file, a directory and a "
              "PNG wider than 2048 px",
    ),
    Scenario(
        "view_image_040", "Look at the pictures here.",
        _view_image_files(), _view_image_turns,
        exit_codes={}, versions=("0.40.0",),
        notes="Codex 0.40's view_image (its separate image message): the view_image scenario's calls",
    ),
    Scenario(
        "shell_040", "Inspect the files with the shell tool.",
        {"a.txt": "alpha\n", "b.txt": "beta\n", "sub/c.txt": "gamma\n"},
        lambda cwd: [[text("Reading both files in parallel."),
                      shell(["bash", "-lc", "sleep 1 && cat a.txt"], workdir=".", timeout_ms=120000),
                      shell(["bash", "-lc", "cat b.txt"], workdir=".", timeout_ms=120000)],
                     # never served: 0.40 sends each call followed by its output, so the scripted model counts
                     # the parallel step as two turns
                     [text("(skipped)")],
                     [shell(["ls", "missing-dir"], workdir=".", timeout_ms=120000)],
                     [shell(["no-such-command-fp"], workdir=".")],
                     [shell(["pwd"], workdir="missing-dir")],
                     [shell(["bash", "-lc", "echo before; sleep 5; echo after"], timeout_ms=500)],
                     [shell(["bash", "-lc", "seq 1 3000"], workdir=".", timeout_ms=120000)],
                     [shell(["bash", "-lc", "pwd; cat c.txt; echo err >&2"], workdir="sub")],
                     [shell(["bash", "-lc", "printf 'no newline'; exit 3"])],
                     [shell(["bash", "-lc", "for i in $(seq 1 300); do printf 'x%.0s' $(seq 1 99); echo; done"])],
                     [shell(["bash", "-lc", "printf 'bad \\xff\\xfe byte\\n\\ttab \\033[1mbold\\n'"])],
                     [shell(["apply_patch", "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"])],
                     [shell(["bash", "-lc", "apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: a.txt\n@@\n"
                                            "-alpha\n+ALPHA\n*** End Patch\nEOF\n"])],
                     [shell(["apply_patch", "*** Begin Patch\n*** Update File: missing.txt\n@@\n-x\n+y\n"
                                            "*** End Patch\n"])],
                     [shell(["apply_patch", "garbage"])],
                     [shell(["bash", "-lc", "cat a.txt hello.txt"])],
                     [tool_use("update_plan", PLAN)],
                     [text("Done with the shell tool.")]],
        exit_codes={}, versions=("0.40.0",), check=_check_shell_040,
        notes="Codex 0.40's `shell` tool (argv command, workdir, timeout_ms; JSON output with exit_code and "
              "duration_seconds): parallel calls, a non-zero exit, a missing program, a timeout, a large output, "
              "a workdir, stderr, apply_patch through shell (argv and heredoc; success and refusals), update_plan",
    ),
    Scenario(
        "truncation_0138", "Print long outputs.",
        {"README.md": "# demo\n"},
        lambda cwd: [[exec_command("seq 1 20000")],
                     [tool_use("exec_command", {"cmd": "seq 1 3000", "max_output_tokens": 100})],
                     [exec_command("head -c 300000 /dev/zero | tr '\\0' x; echo")],
                     [text("Printed them.")]],
        exit_codes={0: 0, 1: 0, 2: 0}, versions=("0.138.0",),
        notes="Codex 0.138-0.141 truncate a long exec_command output without the 'Warning: truncated output' "
              "line 0.142 added (tools.TRUNCATION_WARNING_FROM): many lines, a small max_output_tokens, one long "
              "line (all under exec_command's 1 MiB capture, which 0.138 does not apply the same way)",
    ),
    Scenario(
        "truncation_096", "Print a long output.",
        {"README.md": "# demo\n"},
        lambda cwd: [[tool_use("exec_command", {"cmd": "seq 1 3000", "max_output_tokens": 100})],
                     [text("Printed it.")]],
        exit_codes={0: 0}, versions=("0.96.0",),
        notes="Codex 0.96.0, the first exec_command release, truncates as 0.138-0.141 do (no 'Warning: truncated "
              "output' line, tools.NO_TRUNCATION_WARNING): the first release of that profile's range",
    ),
]}

#: releases recorded besides the verified versions (their tools are re-run by a recorded-version profile)
RELEASES = ("0.40.0", "0.96.0", "0.138.0")


def _sha256(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def compact_request(entry: Json) -> Json:
    """A request log entry with the big, constant parts (instructions, tools) replaced by hashes / names."""
    out = {k: v for k, v in entry.items() if k != "body"}
    body = entry.get("body")
    if isinstance(body, dict):
        slim = dict(body)
        for key in ("instructions", "tools"):
            if key in slim:
                slim[f"{key}_sha256"] = _sha256(slim.pop(key))
        slim["tool_names"] = [t.get("name") or t.get("type") for t in body.get("tools") or []]
        out["body"] = slim
    return out


def run_codex(runtime: runtimes.Runtime, scenario: Scenario, model: ScriptedModel, cwd: Path, home: Path,
              out: Path) -> tuple[int, Json]:
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    argv = [str(runtime.entrypoint), *command_args(scenario)]
    with model.serve() as url:
        (codex_home / "config.toml").write_text(CONFIG_TOML.format(base_url=f"{url}/v1"), "utf-8")
        env = environment(home, codex_home)
        with (out / "stdout.jsonl").open("wb") as stdout, (out / "stderr.txt").open("wb") as stderr:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr,
                                    start_new_session=True)
            try:
                code = proc.wait(timeout=RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise RuntimeError(f"codex did not finish within {RUN_TIMEOUT_S} s") from None
    return code, env


def command_args(scenario: Scenario) -> list[str]:
    return ["exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", scenario.task]


def environment(home: Path, codex_home: Path) -> Json:
    return {"PATH": CLEAN_PATH, "HOME": str(home), "CODEX_HOME": str(codex_home), "LANG": "C.UTF-8", "TZ": "UTC",
            API_KEY_ENV: "dummy"}


def verify(scenario: Scenario, exit_code: int, expected: list[list[str]], turns: Turns, fixture: Path) -> None:
    assert exit_code == 0, f"codex exited {exit_code}"
    lines = read_jsonl(fixture / "rollout.jsonl")
    assert lines[0].get("type") == "session_meta", f"first line is {lines[0].get('type')}"
    assert all("timestamp" in line for line in lines), "a line without timestamp"
    items = _items(lines)
    calls = {p["call_id"]: p for p in items if p.get("type") in ("function_call", "custom_tool_call")}
    outputs = _outputs(lines)
    for step, ids in enumerate(expected):
        for index, call_id in enumerate(ids):
            assert call_id in calls, f"step {step}: call {call_id} missing"
            block = [b for b in turns[step] if b["type"] != "text"][index]
            kind = "custom_tool_call" if block["type"] == "custom_tool_call" else "function_call"
            assert calls[call_id]["type"] == kind, calls[call_id]
            assert call_id in outputs, f"step {step}: no output for {call_id}"
            out_kind = next(p["type"] for p in items if p.get("call_id") == call_id and p["type"].endswith("_output"))
            assert out_kind == f"{kind}_output", out_kind
            if step in scenario.exit_codes and block.get("name") == "exec_command":
                assert f"\nProcess exited with code {scenario.exit_codes[step]}\n" in outputs[call_id], outputs[call_id]
    assert set(outputs) <= set(calls), "output without call"
    last = [p for p in items if p.get("type") == "message" and p.get("role") == "assistant"][-1]
    assert last["content"][0]["text"] == turns[-1][0]["text"], last
    old_release = bool(scenario.versions) and set(scenario.versions) <= set(RELEASES)  # 0.40 logs no task_complete
    assert old_release or any(line["payload"].get("type") == "task_complete"
                              for line in lines if line["type"] == "event_msg")
    if scenario.check:
        scenario.check(lines)


def record(version: str, scenario: Scenario) -> Path:
    runtime = installed("codex", version)
    probed = runtimes.probe_version(runtime)
    cwd, home = REC_ROOT / scenario.name, HOME_ROOT / scenario.name
    fixture = FIXTURES / version / scenario.name
    fresh_scenario(cwd, home, fixture, scenario.files)
    seed = f"codex/{scenario.name}"
    turns = scenario.turns(str(cwd))
    write_script(fixture, seed, turns)
    model = scenario.model(turns, seed=seed, model=MODEL)
    expected = [[item["call_id"] for item in model.respond_responses("main", step)[1] if "call_id" in item]
                for step in range(len(turns))]
    exit_code, env = run_codex(runtime, scenario, model, cwd, home, fixture)
    codex_home = home / ".codex"
    rollouts = sorted((codex_home / "sessions").rglob("rollout-*.jsonl"))
    if len(rollouts) != 1:
        raise RuntimeError(f"expected one rollout under {codex_home / 'sessions'}, found {rollouts}")
    shutil.copyfile(rollouts[0], fixture / "rollout.jsonl")
    write_requests(fixture / "requests.jsonl", model.requests, compact_request)
    first = read_jsonl(fixture / "rollout.jsonl")[0]
    session_id = first.get("payload", {}).get("id")
    started = next((line for line in read_jsonl(fixture / "stdout.jsonl") if line.get("type") == "thread.started"), {})
    if started.get("thread_id") not in (None, session_id):
        raise RuntimeError(f"stdout thread {started.get('thread_id')} != session_meta id {session_id}")
    meta = {
        "agent": "codex", "version": version, "probed_version": probed, "scenario": scenario.name,
        "session_id": session_id, "cwd": str(cwd), "home": str(home), "codex_home": str(codex_home),
        "rollout_path": str(rollouts[0].relative_to(codex_home)),
        "command": ["codex", *command_args(scenario)], "stdin": "/dev/null",
        "entrypoint": runtime.manifest()["entrypoint"],
        "env": env,
        "config_toml": CONFIG_TOML.format(base_url="<scripted model url>/v1"),
        "model": MODEL, "exit_code": exit_code, "expected_call_ids": expected, "notes": scenario.notes,
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    }
    (fixture / "meta.json").write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
    verify(scenario, exit_code, expected, turns, fixture)
    resolve_sessions(fixture)
    return fixture


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="append", choices=(*agent_spec("codex").versions, *RELEASES))
    parser.add_argument("--scenario", action="append", choices=sorted(SCENARIOS))
    args = parser.parse_args()
    failed = []
    for version in args.version or tuple(agent_spec("codex").versions):
        for name in args.scenario or list(SCENARIOS):
            scenario = SCENARIOS[name]
            if (scenario.versions or version in RELEASES) and version not in scenario.versions:
                continue
            try:
                fixture = record(version, scenario)
                print(f"ok   {version} {name}: {len(read_jsonl(fixture / 'rollout.jsonl'))} lines")
            except (AssertionError, RuntimeError, StopIteration, KeyError, IndexError) as error:
                failed.append(f"{version}/{name}")
                print(f"FAIL {version} {name}: {error!r}", file=sys.stderr)
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
