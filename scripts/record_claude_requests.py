#!/usr/bin/env python3
"""Re-record the real Claude Code request fixtures for the bridge gate (tests/fixtures/claude_code/requests/).

For every verified Claude Code version installed in forkpoint's runtime cache:

1. record a short real session with the real ``claude`` binary against ScriptedModel: one Bash batch, then a
   parallel batch of two Bash calls, then a final text;
2. for N in (1, 2): cut the session after batch N (keep the lines that have a ``uuid`` up to and including the
   last tool_result line of batch N, in file order; bookkeeping lines are dropped), put it in a fresh private
   HOME under ``.claude/projects/<encoded cwd>/<session-id>.jsonl``, and run
   ``claude --resume <id> -p <NONCE> --output-format stream-json --verbose --dangerously-skip-permissions
   --max-turns 2`` from the same cwd against a fresh ScriptedModel;
3. save, under ``<out>/<version>/<scenario>_after_<N>/``: ``session.jsonl`` (the cut session),
   ``first_request.json`` (the first ``/v1/messages`` body the resumed binary sent; it is answered with one more
   Bash call), ``later_request.json`` (the second body: prefix + envelope + continuation) and
   ``original_request.json`` (the body the same binary sent right after batch N in the recording), plus
   ``meta.json`` (paths, header NAMES, exit codes).

Scenarios: ``parallel`` (cut after 1 and 2) and ``cd`` (a batch that changes the shell's directory, cut after 1).

Header values are never saved and ``metadata.user_id`` is replaced by ``<redacted>``. The bodies hold only
scripted content. Usage: ``python scripts/record_claude_requests.py [--out DIR] [--version V ...]``.

``--release V`` records an unverified release that resumes in a form of its own (``envelope.sender_profile``:
2.1.268-2.1.270) into ``<out>/releases/<V>/`` (install it with ``forkpoint agents calibrate claude-code@V``); the
gate tests check it against the verified version it calibrates as (``meta.json``'s ``read_as``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from forkpoint import runtimes
from forkpoint.adapters.claude_code.envelope import profile_for_version, sender_profile
from forkpoint.adapters.claude_code.spec import SPEC
from forkpoint.testing import ScriptedModel, text, tool_use

NONCE = "__forkpoint_nonce_5e1d0c7a9b3f4e62__"
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "fixtures" / "claude_code" / "requests"
WORK_ROOT = Path("/tmp/forkpoint-record-claude")  # fixed, so the recorded cwd is stable between re-recordings
TIMEOUT_S = 120.0

# scenario -> (recorded script, batches to cut after)
SCENARIOS: dict[str, tuple[list[list[dict[str, Any]]], tuple[int, ...]]] = {
    "parallel": ([
        [text("First I list the files."),
         tool_use("Bash", {"command": "echo one", "description": "Print one"})],
        [text("Now two things at once."),
         tool_use("Bash", {"command": "echo two", "description": "Print two"}),
         tool_use("Bash", {"command": "echo three", "description": "Print three"})],
        [text("All steps are done.")],
    ], (1, 2)),
    # the shell's cwd moves into a subdirectory: 2.1.332 adds an "# Environment update" system message
    "cd": ([
        [text("Into the subdirectory."),
         tool_use("Bash", {"command": "mkdir -p sub && cd sub && pwd", "description": "Enter sub"})],
        [text("Where am I?"), tool_use("Bash", {"command": "pwd", "description": "Print the directory"})],
        [text("Done here.")],
    ], (1, 2)),
}
# what the resumed binary is answered: one more tool call (so a later request is captured), then a final text
RESUME_SCRIPT = [[text("One more."), tool_use("Bash", {"command": "echo four", "description": "Print four"})]]


def encode_cwd(cwd: Path) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", str(cwd))


def agent_env(home: Path, base_url: str) -> dict[str, str]:
    env = {key: os.environ[key] for key in ("PATH", "LANG", "TERM") if key in os.environ}
    env.update(HOME=str(home), ANTHROPIC_BASE_URL=base_url, ANTHROPIC_API_KEY="dummy",
               CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", IS_SANDBOX="1")
    return env


def run_claude(binary: Path, args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(binary), *args, "--output-format", "stream-json", "--verbose",
                           "--dangerously-skip-permissions"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, check=False)


def scrub(body: Any) -> Any:
    if isinstance(body, dict) and isinstance(body.get("metadata"), dict) and "user_id" in body["metadata"]:
        body = {**body, "metadata": {**body["metadata"], "user_id": "<redacted>"}}
    return body


def main_requests(model: ScriptedModel) -> list[dict[str, Any]]:
    return [entry for entry in model.requests if entry.get("kind") == "main"]


def cut_after_batch(lines: list[str], batch: int) -> list[str]:
    """Uuid lines up to the last tool_result line of batch ``batch`` (file order); bookkeeping dropped."""
    records = [json.loads(line) for line in lines]
    tool_message: dict[str, str] = {}
    batches: list[str] = []
    for record in records:
        if record.get("type") != "assistant":
            continue
        message = record["message"]
        for block in message.get("content") or []:
            if isinstance(block, dict) and block.get("type") == "tool_use":
                tool_message[block["id"]] = message["id"]
                if message["id"] not in batches:
                    batches.append(message["id"])
    wanted = {tool_id for tool_id, message_id in tool_message.items() if message_id == batches[batch - 1]}
    last = -1
    for index, record in enumerate(records):
        content = record.get("message", {}).get("content") if record.get("type") == "user" else None
        if isinstance(content, list) and any(isinstance(b, dict) and b.get("tool_use_id") in wanted for b in content):
            last = index
    if last < 0:
        raise SystemExit(f"batch {batch} has no tool_result line")
    return [line for index, line in enumerate(lines[: last + 1]) if "uuid" in records[index]]


def original_after_batch(requests: list[dict[str, Any]], batch: int) -> dict[str, Any]:
    """The recorded request whose last message holds the results of batch ``batch`` (= main request ``batch``)."""
    return dict(requests[batch]["body"])


def record_version(version: str, out: Path, read_as: str | None = None) -> None:
    runtime = runtimes.find("claude-code", version)
    if runtime is None:
        raise SystemExit(f"claude-code {version} is not installed (forkpoint agents install claude-code {version})")
    for scenario, (script, cuts) in SCENARIOS.items():
        record_scenario(runtime.entrypoint, version, scenario, script, cuts, out, read_as)


def record_scenario(binary: Path, version: str, scenario: str, script: list[list[dict[str, Any]]],
                    cuts: tuple[int, ...], out: Path, read_as: str | None = None) -> None:
    work = WORK_ROOT / version / scenario
    shutil.rmtree(work, ignore_errors=True)
    workspace = work / "ws"
    workspace.mkdir(parents=True)
    home = work / "home-record"
    home.mkdir()
    model = ScriptedModel(script, seed=f"record-{version}-{scenario}")
    with model.serve() as url:
        done = run_claude(binary, ["-p", "Run the steps."], workspace, agent_env(home, url))
    if done.returncode != 0:
        raise SystemExit(f"{version} {scenario}: recording run exited {done.returncode}: {done.stderr[-2000:]}")
    sessions = list((home / ".claude" / "projects" / encode_cwd(workspace)).glob("*.jsonl"))
    if len(sessions) != 1:
        raise SystemExit(f"{version} {scenario}: expected one session file, found {sessions}")
    session_id = sessions[0].stem
    lines = sessions[0].read_text("utf-8").splitlines()
    recorded = main_requests(model)
    for batch in cuts:
        case_dir = out / version / f"{scenario}_after_{batch}"
        shutil.rmtree(case_dir, ignore_errors=True)
        case_dir.mkdir(parents=True)
        cut = cut_after_batch(lines, batch)
        (case_dir / "session.jsonl").write_text("".join(line + "\n" for line in cut), "utf-8")
        resume_home = work / f"home-resume-{batch}"
        project = resume_home / ".claude" / "projects" / encode_cwd(workspace)
        project.mkdir(parents=True)
        (project / f"{session_id}.jsonl").write_text("".join(line + "\n" for line in cut), "utf-8")
        resume_model = ScriptedModel(RESUME_SCRIPT, seed=f"resume-{version}-{scenario}-{batch}",
                                     step_mode="counter", final_text="Envelope capture OK.")
        with resume_model.serve() as url:
            resumed = run_claude(binary, ["--resume", session_id, "-p", NONCE, "--max-turns", "2"],
                                 workspace, agent_env(resume_home, url))
        if resumed.returncode != 0:
            raise SystemExit(f"{version} {scenario} N{batch}: resume exited {resumed.returncode}: "
                             f"{resumed.stderr[-2000:]}")
        posts = [e for e in resume_model.requests if e["method"] == "POST" and e["path"].startswith("/v1/messages")]
        if len(posts) < 2:
            raise SystemExit(f"{version} {scenario} N{batch}: expected two /v1/messages requests, got {len(posts)}")
        dump(case_dir / "first_request.json", scrub(posts[0]["body"]))
        dump(case_dir / "later_request.json", scrub(posts[1]["body"]))
        dump(case_dir / "original_request.json", scrub(original_after_batch(recorded, batch)))
        meta = {
            "version": version,
            "scenario": scenario,
            "session_id": session_id,
            "cwd": str(workspace),
            "nonce": NONCE,
            "after_batch": batch,
            **({"read_as": read_as} if read_as is not None else {}),
            "requests": [{"method": e["method"], "path": e["path"], "kind": e.get("kind"),
                          "header_names": sorted(e["headers"])} for e in resume_model.requests],
            "resume_returncode": resumed.returncode,
            "resume_stderr": resumed.stderr.strip()[-1000:],
        }
        dump(case_dir / "meta.json", meta)
        print(f"{version} {scenario}_after_{batch}: {len(cut)} lines, "
              f"{len(posts[0]['body']['messages'])} + {len(posts[1]['body']['messages'])} messages, "
              f"{len(resume_model.requests)} resume request(s)")


def dump(path: Path, value: Any) -> None:
    path.write_text(json.dumps(value, indent=1, ensure_ascii=False) + "\n", "utf-8")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--version", action="append", dest="versions",
                        help="a verified version (default: every installed verified version)")
    parser.add_argument("--release", action="append", dest="releases", default=[],
                        help="an installed release with a measured resume form of its own (2.1.268-2.1.270)")
    args = parser.parse_args(argv)
    for release in args.releases:
        read_as = "2.1.220"  # what 2.1.268-2.1.270 calibrate as (tools exact against both verified versions)
        if sender_profile(release, profile_for_version(read_as)) is profile_for_version(read_as):
            raise SystemExit(f"claude-code {release} resumes in a verified version's form: record that version")
        record_version(release, args.out / "releases", read_as)
    if args.releases and not args.versions:
        return
    versions = args.versions or [r.version for r in runtimes.list_installed() if r.agent == "claude-code"
                                 and r.version in SPEC.versions]
    if not versions:
        raise SystemExit("no Claude Code runtime installed")
    for version in versions:
        runtimes.check_verified("claude-code", version)
        record_version(version, args.out)


if __name__ == "__main__":
    main()
