"""How the real mini-swe-agent continues from the rebuilt prefix (``MiniHooks`` for adapters.kit.continuation).

The companion (in the verified venv) rebuilds the recording's agent with the model's ``api_base`` pointed at the
bridge, seeds ``agent.messages`` with the rebuilt prefix, sets the model-call counter to the prefix's calls and
``step_limit`` to prefix + remaining budget (the recorded ``step_limit`` when no budget was given), and steps the
agent as ``DefaultAgent.run`` does until it exits; mini writes the continued trajectory itself. The first model
request must carry exactly the rebuilt prefix (the Chat gate with mini-swe-agent's profile). The continuation is a
request over the companion's socket, not a process launch: the replay's warm companion when it is still usable,
else a new one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.adapters.kit import continuation as shell
from forkpoint.adapters.kit.continuation import AgentHooks, Collected, GateSpec, Job, LaunchSpec, Outcome, Ran
from forkpoint.adapters.mini_swe_agent.parse import AGENT, MiniNative, parse_trajectory
from forkpoint.adapters.mini_swe_agent.runner import RunnerSession
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import lstat_strict, read_sandbox_file
from forkpoint.core.model import ActionSignature
from forkpoint.core.results import write_atomic

if TYPE_CHECKING:
    from forkpoint.bridge.server import BridgeSummary

#: exit statuses of a run that ended by itself (anything else is an exception name: the run failed)
NORMAL_EXITS = frozenset({"Submitted", "LimitsExceeded", "TimeExceeded", "RepeatedFormatError"})
LIMIT_EXITS = frozenset({"LimitsExceeded", "StepLimitExceeded"})


def step_limit(native: MiniNative, prefix_calls: int, remaining: int | None) -> int:
    """The agent's own limit counts every model call, the prefix's included."""
    if remaining is not None:
        return prefix_calls + remaining
    agent = native.data.get("info", {}).get("config", {}).get("agent", {})
    recorded = agent.get("step_limit") if isinstance(agent, dict) else None
    return int(recorded) if isinstance(recorded, int | float) and recorded > 0 else 0


#: model_kwargs the companion pointed at the bridge; the continued file gets the recording's values back
BRIDGE_MODEL_KWARGS = ("api_base", "api_key", "custom_llm_provider")


def restored_model_config(continued: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    """The continued document with the recording's api_base / api_key (the bridge URL holds the run's secret
    path token and must not outlive the run in an output file)."""
    def kwargs_of(data: dict[str, Any]) -> dict[str, Any] | None:
        model = data.get("info", {}).get("config", {}).get("model")
        value = model.get("model_kwargs") if isinstance(model, dict) else None
        return value if isinstance(value, dict) else None

    target, original = kwargs_of(continued), kwargs_of(source) or {}
    if target is not None:
        for key in BRIDGE_MODEL_KWARGS:
            target.pop(key, None)
            if key in original:
                target[key] = original[key]
    return continued


def _restore_model_config(path: Path, native: MiniNative) -> None:
    import json

    # The companion (and the commands it ran) wrote this file: read it strictly (no link, FIFO or device followed).
    if lstat_strict(path.parent, path.name) is None:
        return
    raw = read_sandbox_file(path.parent, path, kind=ErrorKind.CONTINUATION, what="the continued trajectory")
    data = restored_model_config(json.loads(raw), native.data)
    write_atomic(path, json.dumps(data, indent=2).encode("utf-8"))


def _messages(path: Path) -> list[Any]:
    import json

    data = json.loads(path.read_text("utf-8"))
    messages: list[Any] = data["messages"]
    return messages


def continued_actions(path: Path, after_step: int, prefix_calls: int) -> tuple[ActionSignature | None, int]:
    """The first model turn after the prefix and the number of model turns the continuation made."""
    if not path.is_file():
        raise ReplayError(ErrorKind.CONTINUATION, f"{AGENT} wrote no continued trajectory at {path}")
    try:
        parsed = parse_trajectory(path)
    except ReplayError as error:
        raise shell.reparse_error("trajectory", error) from None
    native = parsed.native
    turns = native.turns[prefix_calls:]
    return (turns[0].signature if turns else None), len(turns)


@dataclass(frozen=True)
class Installed:
    native: MiniNative
    prefix_calls: int
    continued: Path  # mini writes the continued trajectory itself, here


class MiniHooks(AgentHooks[Installed]):
    """``warm``: the replay's companion (recording already loaded), else a new one is started."""

    protocol = "openai-chat"
    label = "mini-swe-agent"
    native_cli = "mini-swe-agent (companion runner)"

    def __init__(self, warm: RunnerSession | None) -> None:
        self.warm = warm
        self.reused = False
        self.expected_sha256: str | None = None
        self.wire_form: str | None = None

    def install(self, job: Job) -> Installed:
        native: MiniNative = job.plan.trajectory.native
        job.continued_dir.mkdir(parents=True, exist_ok=True)
        return Installed(native, native.prefix_calls(job.plan.after_step), job.continued_dir / job.prefix.path.name)

    def gate(self, job: Job, state: Installed) -> GateSpec:
        from forkpoint.adapters.mini_swe_agent.gate import PROFILE, expected_from_native, wire_form
        from forkpoint.bridge.protocols.openai_chat import ChatGate
        from forkpoint.runtimes import trial_release

        # the sender's form: a calibration runs its release in the verified version's place
        target = job.settings.target
        sender = trial_release(job.plan.trajectory.agent, target.entrypoint) or target.version
        form = wire_form(sender, state.native.major)
        self.wire_form = f"{sender}: {form}"
        expected = expected_from_native(job.plan.profile, _messages(job.prefix.path), state.native.major,
                                        job.settings.boundary_prompt, form=form)
        self.expected_sha256 = expected.prefix_sha256
        return GateSpec(ChatGate(PROFILE, expected), {"profile": expected.profile, "messages": len(expected.messages),
                                                      "sha256": expected.prefix_sha256,
                                                      "wire_form": self.wire_form})

    def launch(self, job: Job, state: Installed, bridge_url: str) -> LaunchSpec:
        from forkpoint.adapters.mini_swe_agent.tools import LOG_NAME

        settings = job.settings
        request = {"op": "continue", "prefix": str(job.prefix.path), "output": str(state.continued),
                   "api_base": bridge_url + "/v1", "api_key": shell.BRIDGE_KEY, "prefix_calls": state.prefix_calls,
                   "step_limit": step_limit(state.native, state.prefix_calls, settings.remaining_steps),
                   "boundary_prompt": settings.boundary_prompt}
        return LaunchSpec([], {}, str(job.context.workspace), job.context.logs / LOG_NAME, request=request)

    def run(self, job: Job, state: Installed, spec: LaunchSpec) -> Ran:
        """A request to the companion: the warm one if it is alive on the same venv and may reach the bridge (a
        sandbox without its own network), else a new one; in a network-less sandbox behind the bridge relay."""
        python, warm = job.settings.target.entrypoint, self.warm
        self.warm = None
        self.reused = (warm is not None and warm.alive and warm.python == python
                       and not job.sandbox.private_network)
        if warm is not None and not self.reused:
            warm.close()
        if self.reused and warm is not None:
            return self._ask(warm, job, spec)
        if job.sandbox.private_network and spec.bridge_port is not None:
            from forkpoint.sandbox.forward import HostRelay

            with HostRelay(spec.bridge_port, job.context.state_dir) as relay:
                def wrap(argv: list[str]) -> list[str]:
                    return relay.wrap(job.sandbox.host_command(argv))

                return self._ask(self._open(job, state, spec, wrap, relay.readable), job, spec)
        return self._ask(self._open(job, state, spec, None, ()), job, spec)

    @staticmethod
    def _open(job: Job, state: Installed, spec: LaunchSpec, wrap: Callable[[list[str]], list[str]] | None,
              readable: Sequence[Path]) -> RunnerSession:
        from forkpoint.adapters.mini_swe_agent.tools import open_session

        return open_session(job.settings.target.entrypoint, job.plan, job.context, spec.log_path.name,
                            job.settings.timeout_s, network=wrap is None, wrap=wrap,
                            readable=(*readable, job.prefix.path.parent), writable=(state.continued.parent,))

    @staticmethod
    def _ask(session: RunnerSession, job: Job, spec: LaunchSpec) -> Ran:
        try:
            reply = session.request(spec.request, timeout_s=job.settings.timeout_s)
        finally:
            session.close()
        return Ran(None, spec.log_path, reply)

    def outcome(self, job: Job, state: Installed, ran: Ran, summary: BridgeSummary) -> Outcome:
        status = ran.reply.get("exit_status")
        metadata = {"agent_exit_status": status, "prefix_model_calls": state.prefix_calls,
                    "expected_prefix_sha256": self.expected_sha256, "companion_reused": self.reused,
                    "gate_wire_form": self.wire_form}
        if not ran.reply.get("ok"):
            return Outcome("failed", f"the mini-swe-agent companion failed: {ran.reply.get('error')}",
                           ErrorKind.CONTINUATION, metadata)
        if status in LIMIT_EXITS:
            return Outcome("max_steps", metadata=metadata)
        if status not in NORMAL_EXITS and not summary.budget_reached:
            detail = str(ran.reply.get("error") or status)
            return Outcome("failed", f"stopped with {status}: {detail[-500:]}", metadata=metadata)
        return Outcome("completed", metadata=metadata)

    def collect(self, job: Job, state: Installed, ran: Ran, outcome: Outcome,
                summary: BridgeSummary) -> Collected:
        _restore_model_config(state.continued, state.native)
        next_action, steps = continued_actions(state.continued, job.plan.after_step, state.prefix_calls)
        return Collected(state.continued, steps, next_action, {"agent_model_calls": ran.reply.get("n_calls")})
