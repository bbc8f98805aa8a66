"""Codex's calibration probe (forkpoint.adapters.calibrate): one recorded ``codex exec`` and one ``exec resume``.

The rollout is the re-record script's coverage in one run (scripts/record_codex_fixtures.py): parallel
exec_command calls, an apply_patch, a large output and a failing command. The resume is what a continuation does
(``launch.argv``, ``launch.environment``, ``launch.config_toml``): the rollout cut after its first outputs, resumed
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
    run_release,
)
from forkpoint.adapters.spec import AgentSpec
from forkpoint.core.errors import trajectory as trajectory_error

TASK = "Probe every tool: run commands, patch a file."
FILES = {"a.txt": "alpha\n", "b.txt": "beta\n"}
SEED = "codex/calibrate"
MODEL = "gpt-5.5"
PROVIDER = "scripted"
ERROR_STEPS = frozenset({3})
MAX_ROLLOUT_BYTES = 64 * 1024 * 1024


def _turns(shell: bool) -> list[list[dict[str, Any]]]:
    """The probe's turns: with the argv ``shell`` tool when the release offers it (``shell``), else exec_command."""
    from forkpoint.testing.scripted_model import custom_tool_call, text, tool_use

    if shell:
        return _shell_turns()

    def run(cmd: str) -> dict[str, Any]:
        return tool_use("exec_command", {"cmd": cmd})

    return [[text("Reading both files in parallel."), run("sleep 1 && cat a.txt"), run("cat b.txt")],
            [custom_tool_call("apply_patch", "*** Begin Patch\n*** Add File: new.txt\n+line one\n*** End Patch\n")],
            [run("seq 1 20000")],
            [run("ls missing-dir")],
            [text("Done probing.")]]


def _shell_turns() -> list[list[dict[str, Any]]]:
    """The same probe for a release that offers the argv ``shell`` tool (before 0.96: ``tools.SHELL_JSON_BEFORE``;
    0.40 offers the model ``shell`` and ``view_image`` only: no apply_patch for this model), one call a turn: 0.40
    sends each parallel call's output in a request of its own, 0.95 both in one, so a parallel turn would be
    counted differently by the scripted model (0.95.0 was answered ``(never served)``)."""
    from forkpoint.testing.scripted_model import text, tool_use

    def run(cmd: str) -> dict[str, Any]:
        return tool_use("shell", {"command": ["bash", "-lc", cmd], "workdir": ".", "timeout_ms": 120000})

    return [[text("Reading the first file."), run("sleep 1 && cat a.txt")],
            [run("cat b.txt")],
            [run("seq 1 20000")],
            [run("ls missing-dir")],
            [text("Done probing.")]]


def _offers_shell(entrypoint: Path, cwd: Path, home: Path) -> bool:
    """Whether the release offers the model the argv ``shell`` tool and no ``exec_command`` (Codex 0.40), read
    from its own first request (a text-only run in its own home): the release, not a guessed version boundary,
    decides which tool the probe scripts (0.145.0 is before ``tools.SHELL_JSON_BEFORE`` yet answers
    ``unsupported call: shell``)."""
    from forkpoint.testing.scripted_model import ScriptedModel, text

    model = ScriptedModel([[text("Listing the tools only.")]], seed=f"{SEED}/tools", model=MODEL)
    argv = [str(entrypoint), "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
            TASK]
    with model.serve() as url:
        run_release(argv, _home(home, url), cwd, "tool listing")
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    body = main[0].get("body") if main else None
    tools = body.get("tools") if isinstance(body, dict) else None
    if not isinstance(tools, list):
        raise trajectory_error("the release made no model request listing its tools")
    names = {str(tool.get("name")) for tool in tools if isinstance(tool, dict)}
    return "shell" in names and "exec_command" not in names


def _exit_code_shown(output: str, code: int) -> bool:
    """The output reports exit code ``code`` (exec_command's header, or the 0.40 shell JSON's metadata)."""
    return f"Process exited with code {code}\n" in output or f'"exit_code":{code},' in output


def _home(home: Path, url: str) -> dict[str, str]:
    """A fresh CODEX_HOME whose provider is ScriptedModel, and the continuation's environment for it."""
    from forkpoint.adapters.codex.launch import codex_home, config_toml, environment

    codex_home(home).mkdir(parents=True, exist_ok=True)
    (codex_home(home) / "config.toml").write_text(config_toml(url, MODEL, PROVIDER), "utf-8")
    env = environment(os.environ, home)
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    env["TMPDIR"] = str(home / "tmp")
    return env


def _rollout(home: Path) -> Path:
    from forkpoint.adapters.codex.launch import codex_home

    return only_file(sorted((codex_home(home) / "sessions").rglob("rollout-*.jsonl")), "rollout", MAX_ROLLOUT_BYTES)


def _outputs(lines: list[Any]) -> dict[str, str]:
    found = {}
    for line in lines:
        payload = line.get("payload") if isinstance(line, dict) and line.get("type") == "response_item" else None
        if isinstance(payload, dict) and str(payload.get("type", "")).endswith("_output"):
            output = payload.get("output")
            found[str(payload.get("call_id"))] = output if isinstance(output, str) else json.dumps(output)
    return found


def probe(spec: AgentSpec, entrypoint: Path, version: str, candidates: list[str], scratch: Path,
          outcome: Outcome) -> str | None:
    from forkpoint.adapters.codex.launch import argv, codex_home
    from forkpoint.testing.scripted_model import ScriptedModel

    cwd, home = scratch / "workspace", scratch / "home"
    restore = partial(restore_files, cwd, FILES)
    restore()
    shell = _offers_shell(entrypoint, cwd, scratch / "tools-home")
    turns = _turns(shell)
    model = ScriptedModel(turns, seed=SEED, model=MODEL)
    expected = [[item["call_id"] for item in model.respond_responses("main", step)[1] if "call_id" in item]
                for step in range(len(turns))]
    record = [str(entrypoint), "exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox",
              TASK]
    with model.serve() as url:
        code, stderr = run_release(record, _home(home, url), cwd, "probe session")
    if not ran_ok(outcome, code, stderr):
        return None
    rollout = _rollout(home)
    outcome.evidence.update({"rollout.jsonl": rollout.read_bytes(), "requests.jsonl": compact_requests(model.requests)})
    lines = [json.loads(raw) for raw in rollout.read_text("utf-8").splitlines() if raw.strip()]
    outputs = _outputs(lines)
    missing = [i for ids in expected for i in ids if i not in outputs]
    wrong = [i for step, ids in enumerate(expected) for i in ids if i in outputs
             and not _exit_code_shown(outputs[i], 2 if step in ERROR_STEPS else 0)
             and any(name in json.dumps(turns[step]) for name in ('"exec_command"', '"shell"'))]
    calls = sum(map(len, expected))
    if not record_check(outcome, f"{len(lines)} rollout lines", calls, missing, wrong, "wrong exit code") \
            or not parse_check(spec, rollout, version, calls, outcome):
        return None

    nonce = f"fp-calibrate-{secrets.token_hex(16)}"
    cut = _cut_after_first_outputs(lines, expected[0])
    session_id = str(lines[0].get("payload", {}).get("id"))
    resume_home = scratch / "resume-home"
    target = codex_home(resume_home) / rollout.relative_to(codex_home(home))
    resume = ScriptedModel([[{"type": "text", "text": "Resumed."}]], seed=f"{SEED}/resume", model=MODEL)
    with resume.serve() as url:
        env = _home(resume_home, url)
        target.parent.mkdir(parents=True)
        target.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in cut), "utf-8")
        run_release(_resume_argv(argv(entrypoint, session_id, nonce), version), env, cwd, "resume")
    outcome.evidence["resume-requests.jsonl"] = compact_requests(resume.requests)
    main = [entry for entry in resume.requests if entry.get("kind") == "main"]
    if not main:
        raise trajectory_error("the release made no model request after exec resume")
    body = main[0].get("body")

    from forkpoint.adapters.codex.tools import NO_TRUNCATION_WARNING, shell_json_profile, truncation_warning

    own_profile = (shell and shell_json_profile(version)) or not truncation_warning(version)
    if not truncation_warning(version):
        outcome.tool_profile = NO_TRUNCATION_WARNING  # named in the report and the calibration

    def passes(candidate: str) -> bool:
        # a release with a recorded-version tool profile keeps its version: its shell calls / truncated outputs
        # re-run with the profile the RECORDED version selects (tools.shell_json_profile, tools.truncation_warning),
        # the rest as the nearest verified version
        rewritten = lines if own_profile else [
            {**line, "payload": {**line["payload"], "cli_version": candidate}}
            if isinstance(line, dict) and line.get("type") == "session_meta" and isinstance(line.get("payload"), dict)
            else line for line in lines]
        tools_ok = replay_check(spec.name, candidate, rewritten, len(expected) - 1, restore, scratch,
                                outcome, name="rollout.jsonl")
        return _envelope_check(candidate, version, cut, nonce, body, outcome) and tools_ok

    return first_match(candidates, passes, outcome)


#: the probe resumes a release before this one with ``exec``'s options before ``resume`` (every release the sweep
#: ran before 0.149 took them there; 0.40.0 refuses them after it)
OPTIONS_AFTER_RESUME_FROM = (0, 149, 0)


def _resume_argv(command: list[str], version: str) -> list[str]:
    """``launch.argv``; a release before 0.149 takes ``exec``'s options before ``resume`` (0.40.0: ``error:
    unexpected argument '--json' found`` after it)."""
    from forkpoint.core.releases import number

    value = number(version)
    if value is None or value >= OPTIONS_AFTER_RESUME_FROM:
        return command
    options = [arg for arg in command[3:] if arg.startswith("--")]
    return [*command[:2], *options, "resume", *(arg for arg in command[3:] if not arg.startswith("--"))]


def _cut_after_first_outputs(lines: list[Any], ids: list[str]) -> list[Any]:
    last = max(index for index, line in enumerate(lines) if isinstance(line, dict)
               and line.get("type") == "response_item" and isinstance(line.get("payload"), dict)
               and str(line["payload"].get("type", "")).endswith("_output") and line["payload"].get("call_id") in ids)
    return lines[:last + 1]


def _envelope_check(candidate: str, release: str, cut: list[Any], nonce: str, body: Any, outcome: Outcome) -> bool:
    """The gate on the release's first resumed request, the manifest made for what ``release`` sends in
    ``candidate``'s place (``envelope.sender_form``)."""
    from forkpoint.adapters.codex.envelope import ROLLOUT_ITEMS, expected_prefix
    from forkpoint.adapters.codex.gate import clean_first_request
    from forkpoint.core.errors import ReplayError

    items = [line["payload"] for line in cut if isinstance(line, dict) and line.get("type") == "response_item"]
    try:
        expected = expected_prefix(items, nonce, candidate, candidate, sender=release)
        verdict = clean_first_request(expected, body)
    except ReplayError as error:
        outcome.checks.append(Check("resume_envelope", False, f"no manifest: {error.message}", candidate))
        return False
    form = "" if expected.wire_form == ROLLOUT_ITEMS.name else f" (wire form {expected.wire_form})"
    outcome.checks.append(Check("resume_envelope", verdict.ok,
                                f"the gate accepts the first request after exec resume{form}" if verdict.ok
                                else f"the gate refuses it: {verdict.reason}", candidate))
    return verdict.ok
