"""Run forkpoint's companion runner (runner.py) on the OpenHands SDK's Python, and the continuation hooks
(``SdkHooks``) forkpoint.adapters.kit.continuation runs it through.

The runner is a file shipped inside forkpoint, started as ``<venv python> -I runner.py <request.json>`` through
the run's sandbox (deadline, output caps, no surviving descendants: the SDK's tmux server included, it is a
descendant) with an isolated HOME, credentials stripped and litellm's local cost map (no download); its request
and result files live in the run's state dir. See runner.py for the JSON protocol.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.adapters.kit import continuation as shell
from forkpoint.adapters.kit.continuation import AgentHooks, Collected, GateSpec, Job, LaunchSpec, Outcome, Ran
from forkpoint.adapters.kit.python_runner import (
    BRIDGE_KEY_ENV,
    DEFAULT_LIVE_STEPS,
    PROMPT_ENV,
    PythonRunner,
    chat_gate,
    continue_env,
)
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import read_file_strict, refused_as
from forkpoint.core.model import JsonObject
from forkpoint.core.results import write_atomic

if TYPE_CHECKING:
    from forkpoint.bridge.server import BridgeSummary

RUNNER = Path(__file__).with_name("runner.py")
SCHEMA = "forkpoint.openhands-sdk-runner/v1"
MAX_ITERATIONS_CODE = "MaxIterationsReached"
MAX_OUT_BYTES = 512 * 1024 * 1024


#: the runner's host side (kit.python_runner): started on the SDK's Python in the run's sandbox; the SDK's tmux
#: server keeps its socket in TMUX_TMPDIR (the sandbox's private /tmp under bwrap, a folder removed after the run
#: under local: it would otherwise stay behind in ``/tmp/tmux-<uid>/``)
RUNNER_SPEC = PythonRunner(
    RUNNER, SCHEMA, "OpenHands SDK", "openhands-sdk",
    ("OPENAI_", "LLM_", "LITELLM_", "OPENHANDS_", "LMNR_", "OTEL_", "TMUX"),
    {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LOG_LEVEL": "WARNING", "OPENHANDS_SUPPRESS_BANNER": "1"},
    16 * 1024 * 1024, scratch_env="TMUX_TMPDIR", scratch_prefix="fp-ohsdk-", error_fails=True)
work_dir = RUNNER_SPEC.work_dir
environment = RUNNER_SPEC.environment
run_runner = RUNNER_SPEC.run


def read_out(work: Path, name: str, kind: ErrorKind, what: str) -> Any:
    """A JSON file the runner wrote in its (writable) folder: strictly, bounded."""
    try:
        with refused_as(kind, f"read {what}"):
            return json.loads(read_file_strict(work, name, max_bytes=MAX_OUT_BYTES))
    except ValueError as error:
        raise ReplayError(kind, f"{what} is not readable JSON: {error}") from None


def bridge_model(base_state: JsonObject) -> str:
    """The recorded model as litellm's OpenAI-compatible provider names it (``openai/<model>``): the continued
    SDK talks Chat Completions to the bridge whatever provider the recording used."""
    llm = base_state.get("agent", {}).get("llm") if isinstance(base_state.get("agent"), dict) else None
    model = llm.get("model") if isinstance(llm, dict) else None
    name = model.split("/", 1)[-1] if isinstance(model, str) and model else "gpt-4o"
    return f"openai/{name}"


@dataclass(frozen=True)
class Installed:
    document: JsonObject  # the rebuilt prefix bundle
    work: Path
    conversations: Path  # the persistence dir (the conversation is ``<it>/<id hex>/``)
    out: Path


class SdkHooks(AgentHooks[Installed]):
    """``runner.py continue``: the SDK resumes the rebuilt conversation from its persistence dir (its own resume)
    with the recorded agent, its LLM pointed at the bridge, and runs it; litellm -> the bridge -> the gate."""

    protocol = "openai-chat"
    label = "OpenHands SDK"
    native_cli = "openhands-sdk"

    def install(self, job: Job) -> Installed:
        from forkpoint.adapters.openhands_sdk.session import materialise

        document = json.loads(job.prefix.path.read_text("utf-8"))
        work = work_dir(job.context)
        conversations = work / "conversations"
        conversations.mkdir(exist_ok=True)
        try:
            materialise(document, conversations)
        except (OSError, ReplayError) as error:
            raise ReplayError(ErrorKind.CONTINUATION, f"cannot install the OpenHands SDK conversation: {error}") \
                from None
        return Installed(document, work, conversations, work / "continued.json")

    def gate(self, job: Job, state: Installed) -> GateSpec:
        from forkpoint.adapters.openhands_sdk.envelope import PrefixError, expected_messages
        from forkpoint.adapters.openhands_sdk.gate import PROFILE

        return chat_gate(job, PROFILE, lambda: expected_messages(state.document["events"]), PrefixError)

    def launch(self, job: Job, state: Installed, bridge_url: str) -> LaunchSpec:
        remaining, prompt = job.settings.remaining_steps, job.boundary_prompt
        request: dict[str, Any] = {
            "mode": "continue", "workspace": job.sandbox.cwd, "persistence_dir": str(state.conversations),
            "conversation_id": state.document["base_state"]["id"], "agent": state.document["base_state"]["agent"],
            "max_iterations": remaining if remaining is not None else DEFAULT_LIVE_STEPS, "out": str(state.out),
            **({"boundary_prompt_env": PROMPT_ENV} if prompt is not None else {}),
            "llm": {"model": bridge_model(state.document["base_state"]), "base_url": f"{bridge_url}/v1",
                    "api_key_env": BRIDGE_KEY_ENV},
        }
        env = continue_env(prompt)
        return LaunchSpec([], env, str(state.work), job.context.logs / "openhands-sdk-continue.log", request=request)

    def run(self, job: Job, state: Installed, spec: LaunchSpec) -> Ran:
        outcome = run_runner(job.settings.target.entrypoint, job.context, "continue", spec.request,
                             timeout_s=job.settings.timeout_s, env_extra=spec.env, bridge_port=spec.bridge_port)
        return Ran(outcome.process, outcome.log, outcome.result)

    def outcome(self, job: Job, state: Installed, ran: Ran, summary: BridgeSummary) -> Outcome:
        result = ran.reply
        raw_codes = result.get("error_codes")
        codes: list[Any] = raw_codes if isinstance(raw_codes, list) else []
        metadata = {"openhands_sdk_execution_status": result.get("execution_status"),
                    "openhands_sdk_error_codes": codes, "openhands_sdk_run_error": result.get("run_error")}
        if MAX_ITERATIONS_CODE in codes:
            return Outcome("max_steps", metadata=metadata)
        if result.get("execution_status") == "finished":
            return Outcome("completed", metadata=metadata)
        if summary.budget_reached:
            return Outcome("max_steps", metadata=metadata)
        return Outcome("failed", f"ended in state {result.get('execution_status')!r}: "
                                 f"{result.get('run_error') or ', '.join(map(str, codes)) or 'no error'}",
                       metadata=metadata)

    def collect(self, job: Job, state: Installed, ran: Ran, outcome: Outcome,
                summary: BridgeSummary) -> Collected:
        from forkpoint.adapters.openhands_sdk.parse import parse_conversation

        document = read_out(state.work, state.out.name, ErrorKind.CONTINUATION, "the continued OpenHands SDK "
                                                                                 "conversation")
        path = job.continued_dir / job.prefix.path.name
        try:
            write_atomic(path, json.dumps(document, indent=1).encode("utf-8"))
            continued = parse_conversation(path)
        except (OSError, ReplayError) as error:
            raise ReplayError(ErrorKind.CONTINUATION, f"the continued OpenHands SDK conversation is unusable: "
                                                      f"{error}") from None
        return Collected(path, summary.validated, shell.next_action_at(continued.next_actions, job.plan.after_step))
