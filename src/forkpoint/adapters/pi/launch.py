"""How the real Pi (0.83.0, 1.6.0) continues the rebuilt session through its SDK (the Node runner): ``PiHooks`` for
forkpoint.adapters.kit.continuation.

The rebuilt v3 session goes to ``<agent dir>/sessions/--<cwd>--/`` in an isolated agent dir under the state dir
(``PI_CODING_AGENT_DIR``), with a ``models.json`` pointing the recorded provider/model at the bridge (Pi's
``openai-completions`` API) and a ``settings.json`` without auto-retry or compaction. No boundary prompt ->
``session.agent.continue()`` (no user message at all); a boundary prompt -> one ``session.prompt(NONCE)`` whose
nonce the gate swaps for the prompt, so the prompt text never reaches Pi's files during the run. Pi has no step
option: the runner stops the agent loop after ``remaining`` turns (and the bridge refuses any request past it).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from forkpoint.adapters.kit import continuation as shell
from forkpoint.adapters.kit.continuation import AgentHooks, Collected, GateSpec, Job, LaunchSpec, Outcome, Ran
from forkpoint.adapters.pi.gate import context_messages, expected_prefix
from forkpoint.adapters.pi.parse import DEFAULT_TOOLS, PiNative, dumps, model_turns, parse_pi
from forkpoint.adapters.pi.runtime import PiRuntime, from_entrypoint
from forkpoint.adapters.pi.tools import _last_json_line, fd_for, fd_paths, tool_environment
from forkpoint.core.errors import ErrorKind, ReplayError, unsupported_version
from forkpoint.core.fs import lstat_strict, make_dirs_strict, read_sandbox_file, refused_as
from forkpoint.core.model import ActionSignature, JsonObject
from forkpoint.core.results import write_atomic

if TYPE_CHECKING:
    from forkpoint.bridge.server import BridgeSummary

API = "openai-completions"
SETTINGS = {"retry": {"enabled": False}, "compaction": {"enabled": False}}


def agent_dir(home: Path) -> Path:
    return home / ".pi" / "agent"


def session_dir_name(cwd: str) -> str:
    """Pi's per-cwd folder: ``--<cwd with / as ->--``."""
    return "--" + cwd.strip("/").replace("/", "-") + "--"


def models_json(bridge_url: str, provider: str, model: str) -> JsonObject:
    """The recorded provider/model, served by the bridge (the same settings the fixtures were recorded with)."""
    return {"providers": {provider: {
        "baseUrl": bridge_url + "/v1", "api": API, "apiKey": shell.BRIDGE_KEY,
        "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
        "models": [{"id": model, "name": model, "reasoning": False, "contextWindow": 128000, "maxTokens": 8192}],
    }}}


def recorded_model(native: PiNative) -> tuple[str, str]:
    provider, model, api = native.model_info()
    if provider is None or model is None:
        raise ReplayError(ErrorKind.TRAJECTORY, "the Pi recording names no provider/model on its assistant messages")
    if api != API:
        raise unsupported_version(f"the Pi recording used the {api!r} API; forkpoint continues Pi through its "
                                  f"{API!r} provider only (the verified resume profile)")
    return provider, model


def prefix_messages_of(lines: list[bytes]) -> list[JsonObject]:
    return [obj["message"] for obj in map(orjson.loads, lines) if obj.get("type") == "message"]


def _restore_prompt(lines: list[bytes], nonce: str | None, prompt: str | None) -> bytes:
    """The continued native file as the model saw it: the nonce replaced by the boundary prompt."""
    data = b"".join(line + b"\n" for line in lines)
    if nonce is None or prompt is None:
        return data
    return data.replace(nonce.encode(), orjson.dumps(prompt)[1:-1])


def _continued_actions(path: Path, after_step: int, prefix_count: int) -> tuple[ActionSignature | None, int]:
    try:
        parsed = parse_pi(path)
    except ReplayError as error:
        raise shell.reparse_error("Pi session", error) from None
    steps = sum(1 for index in model_turns(parsed.native.messages) if index >= prefix_count)
    return shell.next_action_at(parsed.next_actions, after_step), steps


@dataclass(frozen=True)
class Installed:
    native: PiNative
    provider: str
    model: str
    runtime: PiRuntime
    rebuilt: list[bytes]
    session_file: Path  # in the isolated agent dir, under the per-cwd folder of the sandbox cwd
    events_dir: Path  # the runner's own folder (bound writable): never the state dir itself
    nonce: str | None  # only with a boundary prompt: no prompt -> ``agent.continue()``, no user message at all


class PiHooks(AgentHooks[Installed]):
    """Pi has no step option: the runner stops the agent loop after ``remaining`` turns (the bridge too)."""

    protocol = "openai-chat"
    label = "the Pi runner"
    native_cli = "pi-sdk"

    def install(self, job: Job) -> Installed:
        native: PiNative = job.plan.trajectory.native
        provider, model = recorded_model(native)
        runtime = from_entrypoint(job.settings.target.entrypoint, job.settings.target.version)
        cwd = job.sandbox.cwd
        rebuilt = job.prefix.path.read_bytes().splitlines()
        rebuilt[0] = dumps({**orjson.loads(rebuilt[0]), "cwd": cwd})  # Pi runs at the workspace
        home = job.context.home
        target = agent_dir(home) / "sessions" / session_dir_name(cwd) / job.prefix.path.name
        # Replayed tools could write the HOME: no link planted there is followed (forkpoint.core.fs strict helpers).
        shell.write_home_file(home, target, b"".join(line + b"\n" for line in rebuilt))
        shell.write_home_file(home, agent_dir(home) / "settings.json", orjson.dumps(SETTINGS))
        events_dir = job.context.state_dir / "pi-continue"
        with refused_as(ErrorKind.CONTINUATION, f"create {events_dir}"):
            make_dirs_strict(job.context.state_dir, events_dir.name)
        (events_dir / "events.jsonl").unlink(missing_ok=True)
        nonce = job.nonce if job.boundary_prompt else None
        return Installed(native, provider, model, runtime, rebuilt, target, events_dir, nonce)

    def gate(self, job: Job, state: Installed) -> GateSpec:
        from forkpoint.adapters.pi.gate import PROFILE
        from forkpoint.bridge.protocols.openai_chat import ChatGate

        context = context_messages([orjson.loads(line) for line in state.rebuilt])
        expected = expected_prefix(context, state.nonce, state.model, state.native.tools, job.settings.target.version)
        return GateSpec(ChatGate(PROFILE, expected, job.boundary_prompt), expected.to_json())

    def launch(self, job: Job, state: Installed, bridge_url: str) -> LaunchSpec:
        home, runtime, native = job.context.home, state.runtime, state.native
        models = models_json(bridge_url, state.provider, state.model)
        shell.write_home_file(home, agent_dir(home) / "models.json", orjson.dumps(models))
        request = {"runtime_root": str(runtime.root), "cwd": job.sandbox.cwd, "session_file": str(state.session_file),
                   "provider": state.provider, "model": state.model, "prompt": state.nonce,
                   "max_turns": job.settings.remaining_steps, "events_path": str(state.events_dir / "events.jsonl"),
                   "expected_version": runtime.version,
                   # Pi's --tools: only a set other than the defaults is passed (the recorded default path as is)
                   "tools": list(native.tools) if native.tools != DEFAULT_TOOLS else None}
        fd = fd_for(native.tools)
        env = tool_environment(job.context, fd)
        shell.loopback_no_proxy(env)
        env["PI_CODING_AGENT_DIR"] = str(agent_dir(home))
        return LaunchSpec([str(runtime.node), str(runtime.runner), "continue"], env, job.sandbox.cwd,
                          job.context.logs / "pi-runner.log", writable=(home, state.events_dir),
                          readable=(runtime.root, runtime.runner.parent, *fd_paths(fd)),
                          stdin=orjson.dumps(request))

    def outcome(self, job: Job, state: Installed, ran: Ran, summary: BridgeSummary) -> Outcome:
        reply = _last_json_line(ran.process.stdout) if ran.process is not None else None
        transport = {"method": "prompt" if state.nonce else "agent.continue",
                     "removed_before_model_request": state.nonce is not None}
        metadata: JsonObject = {"native_session_id": job.prefix.session_id, "pi_resume_transport": transport,
                                "pi_tools": {"enabled": list(state.native.tools), "source": TOOLS_SOURCE}}
        if ran.exit_code != 0 or reply is None or "fatal" in reply:
            return Outcome("failed", str(reply.get("fatal")) if reply else "", metadata=metadata)
        if reply.get("agent_status") == "failed":
            return Outcome("failed", f"Pi's continuation ended with a model error: {reply.get('error')}",
                           metadata=metadata)
        turns = int(reply.get("turns") or 0)
        if turns == 0:
            return Outcome("failed", "Pi produced no live continuation turn", ErrorKind.CONTINUATION, metadata)
        status = "max_steps" if reply.get("agent_status") == "max_steps" else "completed"
        return Outcome(status, metadata=metadata, reported_steps=turns)

    def collect(self, job: Job, state: Installed, ran: Ran, outcome: Outcome,
                summary: BridgeSummary) -> Collected:
        home, prompt = job.context.home, job.boundary_prompt
        continued = read_sandbox_file(home, state.session_file, kind=ErrorKind.CONTINUATION,
                                      what="the continued session").splitlines()
        if continued[: len(state.rebuilt)] != state.rebuilt:
            raise ReplayError(ErrorKind.CONTINUATION, "Pi rewrote lines of the rebuilt session prefix")
        path = job.continued_dir / state.session_file.name
        write_atomic(path, _restore_prompt(continued, state.nonce, prompt))
        events_path = state.events_dir / "events.jsonl"
        if lstat_strict(state.events_dir, events_path.name) is not None:
            events = read_sandbox_file(state.events_dir, events_path, kind=ErrorKind.CONTINUATION,
                                       what="the runner's events")
            write_atomic(job.continued_dir / "events.jsonl", _restore_prompt(events.splitlines(), state.nonce, prompt))
            events_path.unlink()
        next_action, steps = _continued_actions(path, job.plan.after_step, len(prefix_messages_of(state.rebuilt)))
        turns = outcome.reported_steps
        if steps != turns:
            raise ReplayError(ErrorKind.CONTINUATION, f"the continued session holds {steps} new model turns but the "
                                                      f"runner counted {turns}")
        reported = outcome.status == "max_steps" or summary.budget_reached
        return Collected(path, steps, next_action, {"max_steps_reported": reported})


TOOLS_SOURCE = ("the recording's calls (Pi does not record its tool set: the defaults, plus optional built-ins it "
                "ran, minus built-ins it rejected)")
