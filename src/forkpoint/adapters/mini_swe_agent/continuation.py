"""Continue the real mini-swe-agent from the rebuilt prefix, its model traffic behind the fail-closed bridge.

The companion (in the verified venv) rebuilds the recording's agent with the model's ``api_base`` pointed at the
bridge, seeds ``agent.messages`` with the rebuilt prefix, sets the model-call counter to the prefix's calls and
``step_limit`` to prefix + remaining budget (the recorded ``step_limit`` when no budget was given), and steps the
agent as ``DefaultAgent.run`` does until it exits; mini writes the continued trajectory itself. The first model
request must carry exactly the rebuilt prefix (MiniChatGate).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from forkpoint.adapters.mini_swe_agent.gate import PROFILE, expected_from_native
from forkpoint.adapters.mini_swe_agent.parse import AGENT, MiniNative, parse_trajectory
from forkpoint.adapters.mini_swe_agent.runner import BRIDGE_KEY, RunnerSession
from forkpoint.adapters.mini_swe_agent.tools import LOG_NAME, open_session
from forkpoint.bridge.protocols import make_upstream
from forkpoint.bridge.protocols.openai_chat import ChatGate
from forkpoint.bridge.server import Bridge
from forkpoint.bridge.upstream import Upstream
from forkpoint.errors import ErrorKind, ReplayError, classify_continuation_output
from forkpoint.fs import lstat_strict, read_sandbox_file
from forkpoint.model import ActionSignature, Continuation, ContinueSettings, NativePrefix, Plan, RunContext
from forkpoint.results import write_atomic, write_json

#: exit statuses of a run that ended by itself (anything else is an exception name: the run failed)
NORMAL_EXITS = frozenset({"Submitted", "LimitsExceeded", "TimeExceeded", "RepeatedFormatError"})
LIMIT_EXITS = frozenset({"LimitsExceeded", "StepLimitExceeded"})


def _upstream(settings: ContinueSettings) -> Upstream:
    return make_upstream("openai-chat", settings.upstream, settings.upstream_url, settings.upstream_key)


def step_limit(native: MiniNative, prefix_calls: int, remaining: int | None) -> int:
    """The agent's own limit counts every model call, the prefix's included."""
    if remaining is not None:
        return prefix_calls + remaining
    agent = native.data.get("info", {}).get("config", {}).get("agent", {})
    recorded = agent.get("step_limit") if isinstance(agent, dict) else None
    return int(recorded) if isinstance(recorded, int | float) and recorded > 0 else 0


def continue_trajectory(plan: Plan, prefix: NativePrefix, context: RunContext, settings: ContinueSettings,
                        warm: RunnerSession | None = None) -> Continuation:
    """``warm``: the replay's companion (recording already loaded), else a new one is started."""
    native = plan.trajectory.native
    assert isinstance(native, MiniNative)
    prefix_messages = _messages(prefix.path)
    expected = expected_from_native(plan.profile, prefix_messages, native.major, settings.boundary_prompt)
    write_json(context.state_dir / "expected-prefix.json",
               {"profile": expected.profile, "messages": len(expected.messages), "sha256": expected.prefix_sha256})
    prefix_calls = native.prefix_calls(plan.after_step)
    continued = context.output_dir / "native" / "continued" / prefix.path.name
    continued.parent.mkdir(parents=True, exist_ok=True)
    log = context.logs / LOG_NAME
    bridge = Bridge(ChatGate(PROFILE, expected), _upstream(settings), log_path=context.state_dir / "bridge-log.jsonl",
                    max_model_requests=settings.remaining_steps)
    with bridge:
        usable = warm is not None and warm.alive and warm.python == settings.target.entrypoint
        if warm is not None and not usable:
            warm.close()
        session = warm if usable and warm is not None else open_session(settings.target.entrypoint, plan, context,
                                                                          log.name, settings.timeout_s)
        metadata_reused = usable
        try:
            reply = session.request({
                "op": "continue", "prefix": str(prefix.path), "output": str(continued),
                "api_base": bridge.base_url + "/v1", "api_key": BRIDGE_KEY, "prefix_calls": prefix_calls,
                "step_limit": step_limit(native, prefix_calls, settings.remaining_steps),
                "boundary_prompt": settings.boundary_prompt,
            }, timeout_s=settings.timeout_s)
        finally:
            session.close()
        summary = bridge.finish()
    status = reply.get("exit_status")
    metadata: dict[str, Any] = {"native_cli": "mini-swe-agent (companion runner)", "model_bridge": summary.to_json(),
                                "agent_exit_status": status, "agent_log": str(log), "prefix_model_calls": prefix_calls,
                                "expected_prefix_sha256": expected.prefix_sha256, "companion_reused": metadata_reused}
    bridge_error = summary.error()
    if bridge_error is not None:
        raise ReplayError(bridge_error.kind, f"{bridge_error.message} (mini-swe-agent exit status {status})")
    if not reply.get("ok"):
        raise ReplayError(ErrorKind.CONTINUATION, f"the mini-swe-agent companion failed: {reply.get('error')}; "
                                                  f"see {log}")
    if status not in NORMAL_EXITS and not summary.budget_reached:
        detail = str(reply.get("error") or status)
        raise ReplayError(classify_continuation_output(detail), f"mini-swe-agent stopped with {status}: "
                                                                f"{detail[-500:]}; see {log}")
    _restore_model_config(continued, native)
    next_action, steps = continued_actions(continued, plan.after_step, prefix_calls)
    metadata["agent_model_calls"] = reply.get("n_calls")
    return Continuation(agent_status="max_steps" if status in LIMIT_EXITS or summary.budget_reached else "completed",
                        continued_steps=steps, continued_path=continued, next_action=next_action, metadata=metadata)


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
        raise ReplayError(ErrorKind.CONTINUATION, f"the continued trajectory does not parse: {error.message}") from None
    native = parsed.native
    assert isinstance(native, MiniNative)
    turns = native.turns[prefix_calls:]
    return (turns[0].signature if turns else None), len(turns)
