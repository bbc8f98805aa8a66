"""How the real ``opencode run --session`` continues the rebuilt session (``OpenCodeHooks`` for
forkpoint.adapters.kit.continuation).

1. ``opencode import <cut export>`` into a fresh private data dir (XDG_* under the run's state dir): the binary
   creates and migrates ``opencode.db`` itself and keeps the session id, title and ``permission``.
2. ``opencode.json`` pins the recorded provider id and model, served by ``@ai-sdk/openai-compatible`` at the
   bridge; every permission is allowed; no ``agent.build.steps`` (it would inject a step-limit message).
3. ``opencode run --format=json --thinking --print-logs --session <id> --model <provider/model> <NONCE>``
   (``--thinking`` only where the release offers it: run_options)
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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.kit import continuation as shell
from forkpoint.adapters.kit.continuation import AgentHooks, Collected, GateSpec, Job, LaunchSpec, Outcome, Ran
from forkpoint.adapters.kit.ids import check_id
from forkpoint.adapters.opencode.database import Reconciled, database_path, reconcile
from forkpoint.adapters.opencode.parse import parse_opencode
from forkpoint.adapters.opencode.session import native_of
from forkpoint.adapters.opencode.toolhost import PROXY_SINK, opencode_env, provider_config, write_config
from forkpoint.adapters.opencode.watchdog import DEFAULT_IDLE_S, StepWatch
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES, read_regular_file
from forkpoint.core.model import JsonObject, RunContext
from forkpoint.core.results import write_atomic
from forkpoint.sandbox import local_sandbox, runtime_paths

if TYPE_CHECKING:
    from forkpoint.bridge.server import BridgeSummary

IDLE_ENV = "FORKPOINT_OPENCODE_IDLE_TIMEOUT_S"
HELPER_TIMEOUT_S = 180.0
MAX_EXPORT_BYTES = DEFAULT_MAX_INPUT_BYTES
MAX_EVENTS_BYTES = 64 * 1024 * 1024
#: ``sh -c`` script: run "$@" with stdout appended to the (already created, empty) file "$1"
_TO_FILE = 'out=$1; shift; exec "$@" >>"$out"'


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


def helper(entrypoint: Path, args: list[str], context: RunContext, env: dict[str, str], what: str, *,
           readable: tuple[Path, ...] = (), writable: tuple[Path, ...] = ()) -> bytes:
    """Run a short OpenCode subcommand (import / export) to completion; its failure is a continuation error.

    It runs in the run's sandbox like the agent (cwd as the agent sees it, its HOME and ``writable`` writable,
    ``readable`` — the runtime, the export to import — read-only, no network), so it sees the session's directory
    as ``opencode run`` will."""
    sandbox = context.sandbox or local_sandbox(context.workspace)
    result = sandbox.run([str(entrypoint), *args], cwd=sandbox.cwd, env=env, timeout_s=HELPER_TIMEOUT_S, grace_s=2.0,
                         writable=(context.home, *writable), readable=readable)
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
        helper(Path(command[0]), command[1:], context, env, "export", readable=runtime_paths(entrypoint),
               writable=(target.parent,))
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


#: ``run`` options a release may lack: 1.0.162 and 1.1.16 have no ``--thinking`` (yargs prints the usage and exits
#: 1), 1.1.53 and later have it; without it the events carry no reasoning, the export (the record) still does
RUN_OPTIONS = ("--thinking",)
_HELP_ENV = (("OPENCODE_DISABLE_MODELS_FETCH", "1"), ("OPENCODE_DISABLE_AUTOUPDATE", "1"),
             ("OPENCODE_DISABLE_SHARE", "1"), ("NO_COLOR", "1"), ("HTTP_PROXY", PROXY_SINK),
             ("HTTPS_PROXY", PROXY_SINK), ("http_proxy", PROXY_SINK), ("https_proxy", PROXY_SINK))


def run_options(entrypoint: Path) -> list[str]:
    """:data:`RUN_OPTIONS` the binary at ``entrypoint`` offers: all for a verified runtime (no process); for
    another release (a calibration's probe and resume trial) those its ``run --help`` lists, read once."""
    from forkpoint.adapters.kit.cli_options import offered_options
    from forkpoint.adapters.opencode.spec import SPEC

    return offered_options(SPEC.name, SPEC.versions, entrypoint, RUN_OPTIONS, ("run", "--help"), "--session",
                           _HELP_ENV, private_home=True)


def argv(entrypoint: Path, session_id: str, provider: str, model: str, nonce: str) -> list[str]:
    return [str(entrypoint), "run", "--format=json", *run_options(entrypoint), "--print-logs", "--session",
            check_id(session_id, "session id"),
            "--model", f"{provider}/{model}", nonce]


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


@dataclass(frozen=True)
class Installed:
    export: JsonObject  # the rebuilt session's export (what was imported)
    session_id: str
    provider: str
    model: str
    env: dict[str, str]
    watch: StepWatch  # the step and idle watchdogs of this run

    @property
    def continued_name(self) -> str:
        return f"{self.session_id}.json"


class OpenCodeHooks(AgentHooks[Installed]):
    """Import, run under the watchdogs with stdout on a file, then reconcile the database and export it (also
    when the run failed: the database is the record)."""

    protocol = "openai-chat"
    label = "opencode"
    native_cli = "opencode"

    def install(self, job: Job) -> Installed:
        export = json.loads(job.prefix.path.read_bytes())
        provider, model = recorded_model(export)
        env = opencode_env(job.context.home, job.sandbox.cwd, shell=native_of(job.plan).shell,
                           workspace=job.context.workspace)
        entrypoint = job.settings.target.entrypoint
        helper(entrypoint, ["import", str(job.prefix.path)], job.context, env, "import",
               readable=(*runtime_paths(entrypoint), job.prefix.path.parent))
        watch = StepWatch(job.settings.remaining_steps, idle_limit())
        return Installed(export, str(export["info"]["id"]), provider, model, env, watch)

    def gate(self, job: Job, state: Installed) -> GateSpec:
        from forkpoint.adapters.opencode.envelope import expected_prefix
        from forkpoint.adapters.opencode.gate import profile_for
        from forkpoint.bridge.protocols.openai_chat import ChatGate
        from forkpoint.runtimes import trial_release

        # a calibration runs its release in the verified version's place: the gate expects what that release sends
        target = job.settings.target
        expected = expected_prefix(state.export, job.nonce, target.version, state.model,
                                   sender=trial_release("opencode", target.entrypoint) or target.version)
        return GateSpec(ChatGate(profile_for(expected.profile), expected, job.boundary_prompt), expected.to_json())

    def launch(self, job: Job, state: Installed, bridge_url: str) -> LaunchSpec:
        config = provider_config(state.provider, state.model, bridge_url + "/v1", shell.BRIDGE_KEY)
        write_config(job.context.home, config)
        return LaunchSpec(argv(job.settings.target.entrypoint, state.session_id, state.provider, state.model,
                               job.nonce), state.env, job.sandbox.cwd, job.context.logs / "opencode.log",
                          writable=(job.context.home,), readable=runtime_paths(job.settings.target.entrypoint),
                          watch=state.watch, max_output_bytes=MAX_EVENTS_BYTES)

    def run(self, job: Job, state: Installed, spec: LaunchSpec) -> Ran:
        """Stdout goes to a file the watch reads on every tick (a pipe loses Bun's last events); both streams are
        kept in the output and log folders."""
        watch = state.watch
        with stdout_file(job.context.state_dir, "events.jsonl") as events_file:
            watch.stdout_fd = os.open(events_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            try:
                # in the run's sandbox (under bwrap: no network but the bridge's port); the stdout file's folder
                # is the only state-dir path it may write besides its HOME
                result = shell.run_in_sandbox(job, dataclasses.replace(
                    spec, argv=to_file(events_file, spec.argv), writable=(*spec.writable, events_file.parent)))
                watch.poll()
            finally:
                os.close(watch.stdout_fd)
                watch.stdout_fd = None
            stdout, truncated = read_stdout(events_file, MAX_EVENTS_BYTES)
        result = dataclasses.replace(result, stdout=stdout, stdout_truncated=truncated)
        job.continued_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(job.continued_dir / "events.jsonl", result.stdout)
        write_atomic(spec.log_path, result.stderr)
        return Ran(result, spec.log_path)

    def outcome(self, job: Job, state: Installed, ran: Ran, summary: BridgeSummary) -> Outcome:
        watch, settings = state.watch, job.settings
        metadata: JsonObject = {
            "native_session_id": state.session_id,
            "continued_events": str(job.continued_dir / "events.jsonl"),
            "opencode_resume_transport": {"prompt_mode": "boundary_user_prompt" if settings.boundary_prompt
                                          else "nonce", "removed_before_model_request": True},
            "opencode_step_budget": {"budget": settings.remaining_steps, "completed_steps": watch.steps,
                                     "sigint_sent": watch.budget_fired,
                                     "bridge_refused_over_budget": summary.over_budget},
            "opencode_idle_watchdog": {"limit_s": watch.idle_s, "fired": watch.idle_fired},
            "opencode_shell": state.env.get("SHELL"),  # the recording's (None: unset, OpenCode runs `bash` from PATH)
        }
        if watch.idle_fired:
            continued = job.continued_dir / state.continued_name
            return Outcome("failed", f"OpenCode wrote nothing for {watch.idle_s:.0f} s (idle watchdog) and was "
                                     f"terminated; its session so far is {continued}", ErrorKind.CONTINUATION, metadata)
        return Outcome("max_steps" if watch.budget_fired else "completed", metadata=metadata)

    def salvage(self, job: Job, state: Installed, ran: Ran) -> None:
        self._reconcile(job, state, ran)

    def collect(self, job: Job, state: Installed, ran: Ran, outcome: Outcome,
                summary: BridgeSummary) -> Collected:
        reconciled = self._reconcile(job, state, ran)
        path = job.continued_dir / state.continued_name
        actions = parse_opencode(path).next_actions
        steps = reconciled.new_messages - (job.settings.boundary_prompt is not None)
        return Collected(path, steps, shell.next_action_at(actions, job.plan.after_step),
                         {"opencode_reconciliation": asdict(reconciled)})

    def _reconcile(self, job: Job, state: Installed, ran: Ran) -> Reconciled:
        assert ran.process is not None
        return collect(state.export, job.nonce, job.boundary_prompt, job.context, state.env,
                       job.settings.target.entrypoint, job.continued_dir / state.continued_name, ran.process.stdout)
