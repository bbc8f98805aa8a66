"""Continue the real ``opencode run --session`` on the rebuilt session, its model traffic behind the bridge.

1. ``opencode import <cut export>`` into a fresh private data dir (XDG_* under the run's state dir): the binary
   creates and migrates ``opencode.db`` itself and keeps the session id, title and ``permission``.
2. ``opencode.json`` pins the recorded provider id and model, served by ``@ai-sdk/openai-compatible`` at the
   bridge; every permission is allowed; no ``agent.build.steps`` (it would inject a step-limit message).
3. ``opencode run --format=json --thinking --print-logs --session <id> --model <provider/model> <NONCE>``
   from the workspace, under the step and idle watchdogs (watchdog.StepWatch); the bridge also refuses any
   model request past the budget, so nothing beyond it is ever forwarded.
4. The database is reconciled (database.reconcile: the nonce message removed, empty messages dropped,
   interrupted parts reported) and ``opencode export`` writes the continued session, the native output.

The stdout of ``run`` and ``export`` goes to a file created here, never a pipe: the Bun binary exits without
flushing a pipe, so an export over 64 KiB read through one was cut at 65,536 bytes (and a final ``run`` event of
1.17.11 likewise).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from forkpoint.adapters.opencode.database import Reconciled, database_path, reconcile
from forkpoint.adapters.opencode.envelope import expected_prefix
from forkpoint.adapters.opencode.gate import PROFILE
from forkpoint.adapters.opencode.parse import parse_opencode
from forkpoint.adapters.opencode.session import native_of
from forkpoint.adapters.opencode.toolhost import opencode_env, provider_config, write_config
from forkpoint.adapters.opencode.watchdog import DEFAULT_IDLE_S, StepWatch
from forkpoint.bridge.protocols import make_upstream
from forkpoint.bridge.protocols.openai_chat import ChatGate
from forkpoint.bridge.server import Bridge, BridgeSummary
from forkpoint.bridge.upstream import Upstream
from forkpoint.errors import ErrorKind, ReplayError, classify_continuation_output
from forkpoint.fs import DEFAULT_MAX_INPUT_BYTES, read_regular_file
from forkpoint.hashing import make_nonce
from forkpoint.ids import check_id
from forkpoint.model import Continuation, ContinueSettings, JsonObject, NativePrefix, Plan, RunContext
from forkpoint.process import ProcessResult, run_supervised
from forkpoint.results import write_atomic

IDLE_ENV = "FORKPOINT_OPENCODE_IDLE_TIMEOUT_S"
HELPER_TIMEOUT_S = 180.0
MAX_EXPORT_BYTES = DEFAULT_MAX_INPUT_BYTES
MAX_EVENTS_BYTES = 64 * 1024 * 1024
#: ``sh -c`` script: run "$@" with stdout appended to the (already created, empty) file "$1"
_TO_FILE = 'out=$1; shift; exec "$@" >>"$out"'
_TAIL = 4000


def idle_limit() -> float:
    """The idle watchdog: ``$FORKPOINT_OPENCODE_IDLE_TIMEOUT_S`` or 10 minutes."""
    value = os.environ.get(IDLE_ENV)
    try:
        return float(value) if value else DEFAULT_IDLE_S
    except ValueError:
        raise ReplayError(ErrorKind.CONFIGURATION, f"{IDLE_ENV} must be a number of seconds") from None


def recorded_model(export: JsonObject) -> tuple[str, str]:
    """(providerID, modelID) of the last assistant message (else the session's model): the continuation uses it."""
    for message in reversed(export.get("messages") or []):
        info = message.get("info") or {}
        if info.get("role") == "assistant" and isinstance(info.get("providerID"), str) \
                and isinstance(info.get("modelID"), str):
            return info["providerID"], info["modelID"]
    model = (export.get("info") or {}).get("model") or {}
    if isinstance(model.get("providerID"), str) and isinstance(model.get("id"), str):
        return model["providerID"], model["id"]
    raise ReplayError(ErrorKind.TRAJECTORY, "the OpenCode session names no provider and model to continue with")


def helper(entrypoint: Path, args: list[str], context: RunContext, env: dict[str, str], what: str) -> bytes:
    """Run a short OpenCode subcommand (import / export) to completion; its failure is a continuation error."""
    result = run_supervised([str(entrypoint), *args], cwd=context.workspace, env=env, timeout_s=HELPER_TIMEOUT_S,
                            grace_s=2.0)
    if result.returncode != 0 or result.timed_out:
        tail = (result.stdout[-800:] + result.stderr[-800:]).decode("utf-8", "replace").strip()
        raise ReplayError(ErrorKind.CONTINUATION, f"opencode {what} exited with {result.returncode}: {tail}")
    return result.stdout


@contextmanager
def stdout_file(state_dir: Path, name: str) -> Iterator[Path]:
    """An empty file for a child's stdout: created O_EXCL in a private directory of the run's state dir, removed
    with it afterwards. A child writes it through ``to_file``; read it with ``read_stdout``."""
    state_dir.mkdir(parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix=f"opencode-{name}-", dir=state_dir))
    try:
        target = private / name
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600))
        yield target
    finally:
        shutil.rmtree(private, ignore_errors=True)


def to_file(target: Path, command: list[str]) -> list[str]:
    """``command`` with its stdout appended to ``target`` (``sh`` execs it: the process is the command itself)."""
    return ["/bin/sh", "-c", _TO_FILE, "sh", str(target), *command]


def read_stdout(target: Path, max_bytes: int) -> tuple[bytes, bool]:
    """(the head of a stdout file, whether more was there), bounded and without following a link."""
    read = read_regular_file(target.parent, target.name, max_bytes=max_bytes)
    return read.data, read.truncated


def export_session(entrypoint: Path, session_id: str, context: RunContext, env: dict[str, str]) -> JsonObject:
    """``opencode export <id>`` with its stdout on a file (see ``stdout_file``): Bun does not flush a pipe."""
    with stdout_file(context.state_dir, "export.json") as target:
        command = to_file(target, [str(entrypoint), "export", session_id])
        helper(Path(command[0]), command[1:], context, env, "export")
        data, truncated = read_stdout(target, MAX_EXPORT_BYTES)
    if truncated:
        raise ReplayError(ErrorKind.CONTINUATION, f"opencode export printed more than {MAX_EXPORT_BYTES} bytes")
    return export_json(data)


def export_json(stdout: bytes) -> JsonObject:
    """``opencode export`` output: 1.17 may print a status line before the JSON document."""
    text = stdout.decode("utf-8", "replace")
    start = text.find("{")
    try:
        value = json.loads(text[start:]) if start >= 0 else None
    except ValueError:
        value = None
    if not isinstance(value, dict) or "messages" not in value:
        raise ReplayError(ErrorKind.CONTINUATION, "opencode export did not print a session export")
    return value


def argv(entrypoint: Path, session_id: str, provider: str, model: str, nonce: str) -> list[str]:
    return [str(entrypoint), "run", "--format=json", "--thinking", "--print-logs", "--session",
            check_id(session_id, "session id"),
            "--model", f"{provider}/{model}", nonce]


def continue_session(plan: Plan, prefix: NativePrefix, context: RunContext,
                     settings: ContinueSettings) -> Continuation:
    export = json.loads(prefix.path.read_bytes())
    session_id = str(export["info"]["id"])
    provider, model = recorded_model(export)
    entrypoint, version = settings.target.entrypoint, settings.target.version
    env = opencode_env(context.home, context.workspace, shell=native_of(plan).shell)
    nonce = make_nonce()
    expected = expected_prefix(export, nonce, version, model)
    write_atomic(context.state_dir / "expected-prefix.json", json.dumps(expected.to_json()).encode())
    helper(entrypoint, ["import", str(prefix.path)], context, env, "import")
    context.logs.mkdir(parents=True, exist_ok=True)
    watch = StepWatch(settings.remaining_steps, idle_limit())
    bridge = Bridge(ChatGate(PROFILE, expected, settings.boundary_prompt or None), _upstream(settings),
                    log_path=context.state_dir / "bridge-log.jsonl", max_model_requests=settings.remaining_steps)
    with bridge, stdout_file(context.state_dir, "events.jsonl") as events_file:
        write_config(context.home, provider_config(provider, model, bridge.base_url + "/v1", "forkpoint-bridge"))
        watch.stdout_fd = os.open(events_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            result = run_supervised(to_file(events_file, argv(entrypoint, session_id, provider, model, nonce)),
                                    cwd=context.workspace, env=env, timeout_s=settings.timeout_s, grace_s=2.0,
                                    max_output_bytes=MAX_EVENTS_BYTES, watch=watch, die_with_parent=True)
            watch.poll()
        finally:
            os.close(watch.stdout_fd)
            watch.stdout_fd = None
        stdout, truncated = read_stdout(events_file, MAX_EVENTS_BYTES)
        result = dataclasses.replace(result, stdout=stdout, stdout_truncated=truncated)
    summary = bridge.summary()  # stopped once, by the with block (a second stop would cut its shutdown short)
    continued_dir = context.output_dir / "native" / "continued"
    continued_dir.mkdir(parents=True, exist_ok=True)
    events_path = continued_dir / "events.jsonl"
    write_atomic(events_path, result.stdout)
    write_atomic(context.logs / "opencode.log", result.stderr)
    continued_path = continued_dir / f"{session_id}.json"
    failure = run_failure(summary, watch, result, settings.timeout_s, continued_path, context.logs)
    try:  # the database is the record: reconcile and export it even when the run failed, then report the failure
        reconciled = collect(export, nonce, settings.boundary_prompt or None, context, env, entrypoint,
                             continued_path, result.stdout)
    except ReplayError:
        if failure is not None:
            raise failure from None
        raise
    if failure is not None:
        raise failure
    budget_hit = watch.budget_fired or summary.budget_reached
    metadata: dict[str, Any] = {
        "native_cli": "opencode",
        "native_session_id": session_id,
        "model_bridge": summary.to_json(),
        "agent_exit_code": result.returncode,
        "agent_log": str(context.logs / "opencode.log"),
        "continued_events": str(events_path),
        "opencode_resume_transport": {"prompt_mode": "boundary_user_prompt" if settings.boundary_prompt else "nonce",
                                      "removed_before_model_request": True},
        "opencode_reconciliation": asdict(reconciled),
        "opencode_step_budget": {"budget": settings.remaining_steps, "completed_steps": watch.steps,
                                 "sigint_sent": watch.budget_fired, "bridge_refused_over_budget": summary.over_budget},
        "opencode_idle_watchdog": {"limit_s": watch.idle_s, "fired": watch.idle_fired},
        "opencode_shell": env.get("SHELL"),  # the recording's (None: unset, OpenCode runs `bash` from PATH)
    }
    actions = parse_opencode(continued_path).next_actions
    return Continuation(
        agent_status="max_steps" if budget_hit else "completed",
        continued_steps=reconciled.new_messages - (settings.boundary_prompt is not None),
        continued_path=continued_path,
        next_action=actions[plan.after_step] if plan.after_step < len(actions) else None,
        metadata=metadata,
    )


def run_failure(summary: BridgeSummary, watch: StepWatch, result: ProcessResult, timeout_s: float,
                continued_path: Path, logs: Path) -> ReplayError | None:
    """Why the continuation failed, or None (a watchdog SIGINT at the step budget is not a failure)."""
    tail = (result.stdout[-_TAIL:] + b"\n" + result.stderr[-_TAIL:]).decode("utf-8", "replace")
    bridge_error = summary.error()
    if bridge_error is not None:
        detail = "" if summary.first_failure else f" (opencode exited with {result.returncode}: {tail[-500:].strip()})"
        return ReplayError(bridge_error.kind, bridge_error.message + detail)
    if watch.idle_fired:
        return ReplayError(ErrorKind.CONTINUATION, f"OpenCode wrote nothing for {watch.idle_s:.0f} s (idle watchdog) "
                                                   f"and was terminated; its session so far is {continued_path}")
    if result.timed_out:
        return ReplayError(ErrorKind.CONTINUATION, f"opencode did not finish within {timeout_s:.0f} s")
    if result.returncode != 0 and not (watch.budget_fired or summary.budget_reached):
        return ReplayError(classify_continuation_output(tail),
                           f"opencode exited with {result.returncode}: {tail[-500:].strip()}; see {logs}")
    return None


def collect(export: JsonObject, nonce: str, boundary_prompt: str | None, context: RunContext, env: dict[str, str],
            entrypoint: Path, continued_path: Path, stdout: bytes) -> Reconciled:
    """Reconcile the database, then ``opencode export`` the continued session to ``continued_path``."""
    session_id = str(export["info"]["id"])
    prefix_ids = {str(m["info"]["id"]) for m in export["messages"]}
    task_message = next((str(m["info"]["id"]) for m in reversed(export["messages"])
                         if m["info"].get("role") == "user"), None)
    reconciled = reconcile(database_path(context.home), session_id, prefix_ids, nonce, boundary_prompt, task_message,
                           context.home)
    continued = export_session(entrypoint, check_id(session_id, "session id"), context, env)
    payload = json.dumps(continued, indent=2, ensure_ascii=False).encode()
    if nonce.encode() in payload or nonce.encode() in stdout:
        raise ReplayError(ErrorKind.CONTINUATION, "the resume nonce remains in the continued OpenCode session")
    write_atomic(continued_path, payload)
    return reconciled


def _upstream(settings: ContinueSettings) -> Upstream:
    return make_upstream("openai-chat", settings.upstream, settings.upstream_url, settings.upstream_key)
