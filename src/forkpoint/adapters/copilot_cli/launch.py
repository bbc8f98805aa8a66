"""How the real Copilot CLI 1.0.102 continues the rebuilt session: ``CopilotHooks`` for
forkpoint.adapters.kit.continuation.

Measured on the real binary (docs/adapters/copilot-cli.md): ``copilot --resume=<id> -p <prompt>`` reads
``$COPILOT_HOME/session-state/<id>/events.jsonl`` (the directory's other files are recreated), appends a
``session.resume`` event, the prompt and the new turns to that same file, and continues headless. The prompt is
always the nonce (headless mode needs one), which the gate removes or swaps for the boundary prompt, so its text
never reaches the model. The model traffic goes to the documented BYOK provider ``COPILOT_PROVIDER_BASE_URL`` = the
bridge (type openai: Chat Completions) with ``COPILOT_OFFLINE=true``: no GitHub authentication, telemetry, GitHub
MCP server or update check. Copilot CLI has no step option: the bridge enforces the step budget.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from forkpoint.adapters.copilot_cli.gate import expected_prefix
from forkpoint.adapters.copilot_cli.parse import CopilotNative, model_turns, parse_copilot, signature
from forkpoint.adapters.copilot_cli.runtime import copilot_env, pkg_cache, redundant_options
from forkpoint.adapters.kit import continuation as shell
from forkpoint.adapters.kit.continuation import AgentHooks, Collected, GateSpec, Job, LaunchSpec, Outcome, Ran
from forkpoint.adapters.kit.npm_cli import ca_bundle_env, install_jsonl, usable_model
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import read_sandbox_file
from forkpoint.core.model import JsonObject
from forkpoint.core.results import write_atomic
from forkpoint.sandbox import runtime_paths

if TYPE_CHECKING:
    from forkpoint.bridge.server import BridgeSummary

_MODEL = re.compile(r"[A-Za-z0-9._:/-]{1,128}")


@dataclass(frozen=True)
class Installed:
    native: CopilotNative
    model: str
    rebuilt: list[JsonObject]  # the rebuilt events (what the gate's expected prefix is made of)
    events_file: Path


def recorded_model(native: CopilotNative) -> str:
    return usable_model(native.model, _MODEL, "the Copilot CLI recording names no usable model")


def events_path(home: Path, session_id: str) -> Path:
    """Where Copilot CLI keeps a session's event log (the id is a UUID: the parser checked it)."""
    return home / ".copilot" / "session-state" / session_id / "events.jsonl"


class CopilotHooks(AgentHooks[Installed]):
    protocol = "openai-chat"
    label = "Copilot CLI"
    native_cli = "copilot"

    def install(self, job: Job) -> Installed:
        native: CopilotNative = job.plan.trajectory.native
        model = recorded_model(native)
        target = events_path(job.context.home, native.session_id)
        _, rebuilt = install_jsonl(job.prefix.path, job.context.home, target)
        return Installed(native, model, rebuilt, target)

    def gate(self, job: Job, state: Installed) -> GateSpec:
        from forkpoint.adapters.copilot_cli.gate import PROFILE
        from forkpoint.bridge.protocols.openai_chat import ChatGate

        expected = expected_prefix(state.rebuilt, job.nonce, state.model)
        return GateSpec(ChatGate(PROFILE, expected, job.boundary_prompt), expected.to_json())

    def launch(self, job: Job, state: Installed, bridge_url: str) -> LaunchSpec:
        entrypoint = job.settings.target.entrypoint
        env = copilot_env(job.context.home, bridge_url + "/v1", state.model, entrypoint)
        env.update(ca_bundle_env(job.sandbox))  # in an image root: it refuses to start without trust roots
        shell.loopback_no_proxy(env)
        cache = pkg_cache(entrypoint)
        cache.mkdir(exist_ok=True)
        # a calibration's trial runs an older release here: the options it lacks are dropped (redundant_options)
        argv = [str(entrypoint), "--allow-all", *redundant_options(entrypoint), "--no-ask-user",
                f"--resume={state.native.session_id}", "-p", job.nonce]
        return LaunchSpec(argv, env, job.sandbox.cwd, job.context.logs / "copilot-cli.log",
                          writable=(job.context.home, cache), readable=runtime_paths(entrypoint))

    def outcome(self, job: Job, state: Installed, ran: Ran, summary: BridgeSummary) -> Outcome:
        metadata: JsonObject = {"native_session_id": job.prefix.session_id,
                                "copilot_resume_transport": {"method": "--resume=<id> + -p NONCE (BYOK, offline)",
                                                             "removed_before_model_request": True}}
        if summary.budget_reached:
            return Outcome("max_steps", metadata=metadata)
        if ran.exit_code != 0:
            return Outcome("failed", ran.tail(), metadata=metadata)
        return Outcome("completed", metadata=metadata)

    def collect(self, job: Job, state: Installed, ran: Ran, outcome: Outcome,
                summary: BridgeSummary) -> Collected:
        data = read_sandbox_file(job.context.home, state.events_file, kind=ErrorKind.CONTINUATION,
                                 what="the continued session")
        prompt = job.boundary_prompt
        restored = data.replace(job.nonce.encode(), orjson.dumps(prompt)[1:-1]) if prompt else data
        path = job.continued_dir / state.events_file.name
        write_atomic(path, restored)
        try:
            parsed = parse_copilot(path)
        except ReplayError as error:
            raise shell.reparse_error("Copilot CLI session", error) from None
        events = parsed.native.events
        if [e.get("id") for e in events[: len(state.rebuilt)]] != [e.get("id") for e in state.rebuilt]:
            raise ReplayError(ErrorKind.CONTINUATION, "Copilot CLI changed the rebuilt events of the prefix")
        marker = prompt if prompt else job.nonce
        start = next((i for i in range(len(events) - 1, len(state.rebuilt) - 1, -1)
                      if events[i]["type"] == "user.message" and events[i]["data"].get("content") == marker), None)
        if start is None:
            raise ReplayError(ErrorKind.CONTINUATION, "the continued Copilot CLI session holds no resume prompt")
        turns = [i for i in model_turns(events) if i > start]
        next_action = signature(events[turns[0]]["data"]) if turns else None
        return Collected(path, len(turns), next_action, {"max_steps_reported": summary.budget_reached})
