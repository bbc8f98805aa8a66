#!/usr/bin/env python3
"""Re-record the real Codex request fixtures for the bridge gate (tests/fixtures/codex/requests/).

For every verified Codex version installed in forkpoint's runtime cache:

1. record a short real session with the real ``codex`` binary against ScriptedModel (``codex exec --json ...``);
2. for each cut N: keep the rollout lines 0..(the last ``*_output`` line of batch N) (``session_meta`` first,
   every other line kept byte for byte), put the cut rollout in a FRESH private CODEX_HOME under
   ``sessions/YYYY/MM/DD/<original rollout name>`` with a config.toml pointing at a fresh ScriptedModel, and run
   ``codex exec resume <id> --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox <NONCE>
   </dev/null`` from the recorded cwd (the resumed binary is answered with one more exec_command, so a later
   request is captured too, then a final text);
3. save, under ``<out>/<version>/<case>/``: ``rollout.jsonl`` (the cut rollout), ``first_request.json`` (the
   first ``/v1/responses`` body of the resumed binary), ``later_request.json`` (the second: prefix + envelope +
   continuation), ``original_request.json`` (the body the same binary sent right after batch N while
   recording) and ``meta.json`` (paths, request paths, header NAMES, exit codes, stderr tail).

Cases (``<scenario>_after_<N>[_<variant>]``):

* ``parallel``: exec_command, then two exec_commands in one response, then text; cut after 1 and 2.
* ``apply_patch``: a freeform apply_patch (``custom_tool_call``), then exec_command, then text; cut after 1.
* ``reasoning``: every response starts with a ``reasoning`` item (summary + encrypted_content); cut after 2.
* variants of ``parallel_after_1``: ``samehome`` (the resume's HOME/CODEX_HOME are the recording's paths,
  recreated empty), ``othercwd`` (resumed from another directory than the recorded cwd) and ``openai_provider``
  (the rollout's provider id rewritten to the built-in ``openai``, as in sessions recorded against OpenAI; the
  resume uses the built-in provider with ``openai_base_url`` = ScriptedModel, because 0.171 refuses to resume
  a thread whose provider is not configured and built-in ids cannot be redefined. That provider first tries
  a WebSocket upgrade (GET, refused five times) and sends ``internal_chat_message_metadata_passthrough``).

Cross-version pairs (the spec's ``cross_versions``, for ``--agent-version``): each ``CROSS_CASES`` cut of the
recorded version (as saved under ``<out>/<recorded>/``) is resumed by the continuing binary the same way and saved
under ``<out>/cross/<recorded>-<continuing>/<case>/`` (``--cross-only``: only these, from the saved rollouts).

Bodies: ``client_metadata`` is removed, ``instructions`` and ``tools`` are replaced by ``*_sha256`` (plus
``tool_names``); ``input`` is kept whole. Header values are never saved. Usage:
``python scripts/record_codex_requests.py [--out DIR] [--version V ...] [--cross-only]``.

A release that is not verified but calibrates with a named difference (``--release R [--continue-with V]``) is
recorded the same way under ``<out>/releases/<R>/`` (and resumed by ``V`` under ``<out>/releases/cross/<R>-<V>/``):
the evidence the difference's profile is tested on.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forkpoint import runtimes
from forkpoint.adapters import agent_spec
from forkpoint.adapters.codex.calibrate import OPTIONS_AFTER_RESUME_FROM
from forkpoint.core.releases import number
from forkpoint.testing.scripted_model import Block, ScriptedModel, custom_tool_call, text, thinking, tool_use

NONCE = "__forkpoint_nonce_7c2e9a4b1d3f5e80__"
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "codex" / "requests"
WORK_ROOT = Path("/tmp/forkpoint-record-codex")  # fixed, so the recorded cwd is stable between re-recordings
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"
TIMEOUT_S = 180.0
MODEL = "gpt-5.5"
API_KEY_ENV = "SCRIPTED_API_KEY"
OUTPUT_TYPES = ("function_call_output", "custom_tool_call_output")
CALL_TYPES = ("function_call", "custom_tool_call")

Json = dict[str, Any]

CONFIG_TOML = """model = "{model}"
model_provider = "scripted"

[model_providers.scripted]
name = "ScriptedModel"
base_url = "{base_url}"
wire_api = "responses"
env_key = "{key_env}"
request_max_retries = 0
stream_max_retries = 0

[features]
plugins = false
remote_plugin = false
apps = false
"""


def exec_command(cmd: str) -> Block:
    return tool_use("exec_command", {"cmd": cmd})


@dataclass(frozen=True)
class Scenario:
    task: str
    files: dict[str, str]
    turns: list[list[Block]]
    cuts: tuple[tuple[int, str], ...]  # (after batch N, variant): variant "" / "samehome" / "othercwd"


SCENARIOS: dict[str, Scenario] = {
    "parallel": Scenario(
        "Run the steps.", {"notes.txt": "hello\n"},
        [[text("First I list the files."), exec_command("ls")],
         [text("Now two things at once."), exec_command("echo two"), exec_command("echo three")],
         [text("All steps are done.")]],
        ((1, ""), (2, ""), (1, "samehome"), (1, "othercwd"), (1, "openai_provider")),
    ),
    "apply_patch": Scenario(
        "Create hello.txt and show it.", {"README.md": "# demo\n"},
        [[custom_tool_call("apply_patch", "*** Begin Patch\n*** Add File: hello.txt\n+hello from the patch\n"
                                          "*** End Patch\n")],
         [exec_command("cat hello.txt")],
         [text("hello.txt says hello from the patch.")]],
        ((1, ""),),
    ),
    "reasoning": Scenario(
        "Look around.", {"notes.txt": "hello\n"},
        [[thinking("I should list the files first."), exec_command("ls")],
         [thinking("Now read the notes."), text("Reading notes."), exec_command("cat notes.txt")],
         [text("The notes say hello.")]],
        ((2, ""),),
    ),
}
#: the cases a verified cross-version pair is captured for (the recorded version's cut rollouts)
CROSS_CASES = ("parallel_after_1",)
# what the resumed binary is answered: one more tool call (so a later request is captured), then a final text
RESUME_SCRIPT: list[list[Block]] = [[text("One more."), exec_command("echo four")]]


OPENAI_CONFIG_TOML = """model = "{model}"
openai_base_url = "{base_url}"

[features]
plugins = false
remote_plugin = false
apps = false
"""


def write_config(codex_home: Path, base_url: str, *, builtin_openai: bool = False) -> None:
    codex_home.mkdir(parents=True, exist_ok=True)
    template = OPENAI_CONFIG_TOML if builtin_openai else CONFIG_TOML
    (codex_home / "config.toml").write_text(
        template.format(model=MODEL, base_url=f"{base_url}/v1", key_env=API_KEY_ENV), "utf-8")


def environment(home: Path, *, builtin_openai: bool = False) -> dict[str, str]:
    env = {"PATH": CLEAN_PATH, "HOME": str(home), "CODEX_HOME": str(home / ".codex"), "LANG": "C.UTF-8",
           "TZ": "UTC", API_KEY_ENV: "dummy"}
    if builtin_openai:
        env["OPENAI_API_KEY"] = "dummy"
    return env


def with_builtin_provider(lines: list[str]) -> list[str]:
    """The rollout as if recorded with the built-in ``openai`` provider (session_meta and thread settings)."""
    out = []
    for line in lines:
        record = json.loads(line)
        payload = record.get("payload") or {}
        if record.get("type") == "session_meta":
            payload["model_provider"] = "openai"
        elif payload.get("type") == "thread_settings_applied":
            payload["thread_settings"]["model_provider_id"] = "openai"
        else:
            out.append(line)
            continue
        out.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
    return out


def run_codex(binary: Path, args: list[str], cwd: Path, home: Path, *,
              builtin_openai: bool = False) -> subprocess.CompletedProcess[bytes]:
    proc = subprocess.Popen([str(binary), *args], cwd=cwd, env=environment(home, builtin_openai=builtin_openai),
                            stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise SystemExit(f"codex did not finish within {TIMEOUT_S:.0f} s") from None
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def flags() -> list[str]:
    return ["--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]


def sha256_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def scrub(body: Any) -> Any:
    """Drop ``client_metadata`` (turn ids, installation id); big constant parts become hashes."""
    if not isinstance(body, dict):
        return body
    out = {key: value for key, value in body.items() if key != "client_metadata"}
    if "instructions" in out:
        out["instructions_sha256"] = sha256_json(out.pop("instructions"))
    if "tools" in out:
        tools = out.pop("tools")
        out["tools_sha256"] = sha256_json(tools)
        out["tool_names"] = [t.get("name") or t.get("type") for t in tools if isinstance(t, dict)]
    return out


def cut_after_batch(lines: list[str], batch: int) -> list[str]:
    """Lines 0..(the last output line of batch ``batch``): a batch = the call items of one model response."""
    records = [json.loads(line) for line in lines]
    batches: list[list[str]] = []
    in_run = False
    for record in records:
        payload = record.get("payload") or {}
        if record.get("type") != "response_item":
            continue
        kind = payload.get("type")
        if kind in CALL_TYPES:
            if not in_run:
                batches.append([])
                in_run = True
            batches[-1].append(payload["call_id"])
        elif kind in OUTPUT_TYPES or (kind == "message" and payload.get("role") in ("user", "developer")):
            in_run = False
    wanted = set(batches[batch - 1])
    last = max(index for index, record in enumerate(records)
               if record.get("type") == "response_item" and record["payload"].get("type") in OUTPUT_TYPES
               and record["payload"].get("call_id") in wanted)
    if records[0].get("type") != "session_meta":
        raise SystemExit("the recorded rollout does not start with session_meta")
    return lines[: last + 1]


def responses_posts(model: ScriptedModel) -> list[Json]:
    return [e for e in model.requests if e["method"] == "POST" and str(e["path"]).rstrip("/").endswith("/responses")]


def record_version(version: str, out: Path) -> None:
    runtime = runtimes.find("codex", version)
    if runtime is None:
        raise SystemExit(f"codex {version} is not installed (forkpoint agents install codex@{version})")
    for name, scenario in SCENARIOS.items():
        record_scenario(runtime.entrypoint, version, name, scenario, out)


def record_scenario(binary: Path, version: str, name: str, scenario: Scenario, out: Path) -> None:
    work = WORK_ROOT / version / name
    shutil.rmtree(work, ignore_errors=True)
    workspace = work / "ws"
    workspace.mkdir(parents=True)
    for rel, content in scenario.files.items():
        (workspace / rel).write_text(content, "utf-8")
    home = work / "home-record"
    model = ScriptedModel(scenario.turns, seed=f"codex-requests/{name}", model=MODEL)
    with model.serve() as url:
        write_config(home / ".codex", url)
        done = run_codex(binary, ["exec", *flags(), scenario.task], workspace, home)
    if done.returncode != 0:
        raise SystemExit(f"{version} {name}: recording run exited {done.returncode}: {done.stderr[-2000:]!r}")
    rollouts = sorted((home / ".codex" / "sessions").rglob("rollout-*.jsonl"))
    if len(rollouts) != 1:
        raise SystemExit(f"{version} {name}: expected one rollout, found {rollouts}")
    relative = rollouts[0].relative_to(home / ".codex")
    lines = rollouts[0].read_text("utf-8").splitlines()
    session_id = json.loads(lines[0])["payload"]["id"]
    recorded = responses_posts(model)
    for batch, variant in scenario.cuts:
        case = f"{name}_after_{batch}" + (f"_{variant}" if variant else "")
        case_dir = out / version / case
        shutil.rmtree(case_dir, ignore_errors=True)
        case_dir.mkdir(parents=True)
        cut = cut_after_batch(lines, batch)
        if variant == "openai_provider":
            cut = with_builtin_provider(cut)
        (case_dir / "rollout.jsonl").write_text("".join(line + "\n" for line in cut), "utf-8")
        resume_home = home if variant == "samehome" else work / f"home-resume-{case}"
        shutil.rmtree(resume_home, ignore_errors=True)
        target = resume_home / ".codex" / relative
        target.parent.mkdir(parents=True)
        target.write_text("".join(line + "\n" for line in cut), "utf-8")
        cwd = workspace
        if variant == "othercwd":
            cwd = work / "elsewhere"
            shutil.rmtree(cwd, ignore_errors=True)
            cwd.mkdir()
        dump(case_dir / "original_request.json", scrub(recorded[batch]["body"]))
        meta = {
            "version": version,
            "case": case,
            "scenario": name,
            "variant": variant or "nonce",
            "session_id": session_id,
            "recorded_cwd": str(workspace),
            "resume_cwd": str(cwd),
            "recorded_home": str(home),
            "resume_home": str(resume_home),
            "rollout_path": str(relative),
            "nonce": NONCE,
            "after_batch": batch,
        }
        capture_resume(binary, meta, case_dir, builtin_openai=variant == "openai_provider")


def capture_resume(binary: Path, meta: Json, case_dir: Path, *, builtin_openai: bool = False) -> None:
    """Resume the rollout already placed under ``meta["resume_home"]`` with ``binary`` (from ``resume_cwd``) and
    save its first two ``/responses`` bodies and ``meta.json`` (``meta`` plus the requests and exit code)."""
    case = f"{meta['version']} {meta['case']}"
    resume_model = ScriptedModel(RESUME_SCRIPT, seed=f"codex-resume/{meta['case']}", model=MODEL,
                                 step_mode="counter", final_text="Envelope capture OK.")
    resume_home = Path(meta["resume_home"])
    with resume_model.serve() as url:
        write_config(resume_home / ".codex", url, builtin_openai=builtin_openai)
        resumed = run_codex(binary, resume_args(meta["version"], meta["session_id"]), Path(meta["resume_cwd"]),
                            resume_home, builtin_openai=builtin_openai)
    if resumed.returncode != 0:
        raise SystemExit(f"{case}: resume exited {resumed.returncode}: {resumed.stderr[-2000:]!r}")
    posts = responses_posts(resume_model)
    if len(posts) < 2:
        raise SystemExit(f"{case}: expected two /responses requests, got {len(posts)}")
    dump(case_dir / "first_request.json", scrub(posts[0]["body"]))
    dump(case_dir / "later_request.json", scrub(posts[1]["body"]))
    meta = {
        **meta,
        "requests": [{"method": e["method"], "path": e["path"], "kind": e.get("kind"),
                      "header_names": sorted(h.lower() for h in e["headers"])} for e in resume_model.requests],
        "resume_returncode": resumed.returncode,
        "resume_stderr": resumed.stderr.decode("utf-8", "replace").strip()[-1000:],
    }
    dump(case_dir / "meta.json", meta)
    print(f"{case}: input {len(posts[0]['body']['input'])} + {len(posts[1]['body']['input'])} items, "
          f"{len(resume_model.requests)} resume request(s)")


def resume_args(version: str, session_id: str) -> list[str]:
    """``exec resume``'s arguments; a release before 0.149 takes ``exec``'s options only before ``resume``."""
    if (number(version) or (0, 0, 0)) < OPTIONS_AFTER_RESUME_FROM:
        return ["exec", *flags(), "resume", session_id, NONCE]
    return ["exec", "resume", session_id, *flags(), NONCE]


def record_cross(recorded: str, continuing: str, out: Path) -> None:
    """A verified ``--agent-version`` pair: the ``recorded`` version's cut rollouts (already under ``out``,
    ``CROSS_CASES``) resumed by the ``continuing`` binary, saved under ``out/cross/<recorded>-<continuing>/``
    with the recorded version's ``rollout.jsonl`` and ``original_request.json`` copied next to them."""
    runtime = runtimes.find("codex", continuing)
    if runtime is None:
        raise SystemExit(f"codex {continuing} is not installed (forkpoint agents install codex@{continuing})")
    for case in CROSS_CASES:
        source = out / recorded / case
        meta = json.loads((source / "meta.json").read_text("utf-8"))
        case_dir = out / "cross" / f"{recorded}-{continuing}" / case
        shutil.rmtree(case_dir, ignore_errors=True)
        case_dir.mkdir(parents=True)
        for name in ("rollout.jsonl", "original_request.json"):
            shutil.copyfile(source / name, case_dir / name)
        work = WORK_ROOT / "cross" / f"{recorded}-{continuing}"
        resume_home = work / f"home-resume-{case}"
        shutil.rmtree(resume_home, ignore_errors=True)
        target = resume_home / ".codex" / meta["rollout_path"]
        target.parent.mkdir(parents=True)
        shutil.copyfile(source / "rollout.jsonl", target)
        Path(meta["recorded_cwd"]).mkdir(parents=True, exist_ok=True)
        keep = ("case", "scenario", "variant", "session_id", "recorded_cwd", "recorded_home", "rollout_path",
                "nonce", "after_batch")
        capture_resume(runtime.entrypoint, {"version": continuing, "recorded_version": recorded,
                                            **{key: meta[key] for key in keep},
                                            "resume_cwd": meta["recorded_cwd"], "resume_home": str(resume_home)},
                       case_dir)


def dump(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=1, ensure_ascii=False) + "\n", "utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--version", action="append", dest="versions",
                        help="a verified version (default: every installed verified version)")
    parser.add_argument("--release", action="append", dest="releases", default=[],
                        help="a release that is not verified (a named difference's evidence), saved under "
                             "<out>/releases/<release>/")
    parser.add_argument("--continue-with", action="append", default=[],
                        help="a verified version that resumes each --release's cut rollouts (saved under "
                             "<out>/releases/cross/<release>-<version>/)")
    parser.add_argument("--cross-only", action="store_true",
                        help="only re-capture the verified --agent-version pairs from the saved rollouts")
    args = parser.parse_args(argv)
    for release in args.releases:
        if not args.cross_only:
            record_version(release, args.out / "releases")
        for continuing in args.continue_with:
            record_cross(release, continuing, args.out / "releases")
    if args.releases and not args.versions:
        return
    versions = args.versions or [r.version for r in runtimes.list_installed() if r.agent == "codex"]
    if not versions:
        raise SystemExit("no Codex runtime installed")
    for version in versions:
        runtimes.check_verified("codex", version)
        if not args.cross_only:
            record_version(version, args.out)
    for recorded, continuing in ((old, new) for old, news in agent_spec("codex").cross_versions.items()
                                 for new in news):
        if recorded in versions or continuing in versions:
            record_cross(recorded, continuing, args.out)


if __name__ == "__main__":
    main()
