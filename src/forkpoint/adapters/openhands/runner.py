# mypy: disable-error-code="import-not-found"
"""forkpoint's companion runner for OpenHands 0.62.0: runs INSIDE the OpenHands venv, never in forkpoint.

    <openhands venv>/bin/python runner.py REQUEST.json

Protocol ``forkpoint.openhands-runner/v1`` (documented in docs/adapters/openhands.md). REQUEST.json::

    {"schema": "forkpoint.openhands-runner/v1",
     "mode": "record" | "replay" | "continue",
     "workspace": "/abs/workspace",            # CLIRuntime's workspace_base (commands run there)
     "file_store": "/abs/dir", "sid": "...",
     "save_trajectory": "/abs/out.json",        # OpenHands writes its V0 trajectory there
     "max_iterations": N,
     "task": "...",                             # record only: the initial user message
     "replay_events": "/abs/events.json",       # replay/continue: the ReplayManager input (first = user message)
     "fresh_observations": "/abs/obs.json",     # continue only: observation events for the replayed actions
     "llm": {"model": "openai/x", "base_url": "http://127.0.0.1:P/v1", "api_key_env": "NAME"},
     "boundary_prompt_env": "NAME",             # continue only, optional: a user message after the replay
     "result": "/abs/result.json"}

RESULT (written at the end, also on failure)::

    {"schema": ..., "mode": ..., "agent_state": "finished" | "error" | ..., "iterations": K,
     "replayed_actions": R, "supplied_observations": S, "last_error": str | null, "error": str | null}

Modes: ``record`` runs the task live (fixtures); ``replay`` feeds the replay events through ReplayManager on the
CLI runtime (``max_iterations`` = the number of replayed actions, so the controller stops before any model call);
``continue`` feeds them the same way but the runtime does NOT re-execute the replayed actions: it answers each
with the fresh observation forkpoint already produced (in order, checked against the action), then the agent
continues live through ``llm.base_url`` (forkpoint's bridge) until it finishes or reaches ``max_iterations``.
With ``boundary_prompt_env``, the user message held in that environment variable (never in a file) is appended
to the replay log, so the agent's first live request ends with it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

SCHEMA = "forkpoint.openhands-runner/v1"
#: optional imports OpenHands' own code never needs, left out of every start: jsonschema (imported by mcp) builds
#: an Earley parser for its "iri" format checker from ``rfc3987_syntax`` when that is installed (OpenHands 0.62.0's
#: venv has it): ~2.3 s of CPU of a ~9 s import, paid twice a run (replay, continue). No schema OpenHands validates
#: uses the "iri" formats, and jsonschema then simply has no checker for them (its documented fallback).
SKIPPED_OPTIONAL_MODULES = ("rfc3987_syntax",)


def _config(request: dict[str, Any]) -> Any:
    from openhands.core.config import AgentConfig, LLMConfig, OpenHandsConfig
    from openhands.core.config.condenser_config import NoOpCondenserConfig

    config = OpenHandsConfig(
        runtime="cli", workspace_base=request["workspace"], file_store="local", file_store_path=request["file_store"],
        save_trajectory_path=request["save_trajectory"],
        replay_trajectory_path=request.get("replay_events"),
        max_iterations=int(request["max_iterations"]), default_agent="CodeActAgent", enable_browser=False,
    )
    llm = request["llm"]
    config.set_llm_config(LLMConfig(model=llm["model"], base_url=llm["base_url"],
                                    api_key=os.environ.get(llm["api_key_env"], "forkpoint"),
                                    native_tool_calling=True, num_retries=0, caching_prompt=False))
    config.set_agent_config(AgentConfig(enable_browsing=False, enable_jupyter=False, enable_mcp=False,
                                        enable_prompt_extensions=False, enable_plan_mode=False,
                                        enable_history_truncation=False, condenser=NoOpCondenserConfig()))
    return config


def _supply_fresh(runtime: Any, observations: list[dict[str, Any]]) -> dict[str, int]:
    """Answer the replayed tool calls with forkpoint's fresh observations (by tool call id; no execution).

    Every other action the runtime receives (the task message, live actions) runs normally. Each fresh observation
    is used once, so a live call can never get one.
    """
    from openhands.events.serialization.event import event_from_dict

    pending: dict[str, dict[str, Any]] = {}
    for event in observations:
        call_id = (event.get("tool_call_metadata") or {}).get("tool_call_id")
        if not isinstance(call_id, str) or call_id in pending:
            raise ValueError(f"forkpoint runner: fresh observation {event.get('id')} has no unique tool call id")
        pending[call_id] = event
    counts = {"supplied": 0}
    original = runtime.run_action

    def run_action(action: Any) -> Any:
        metadata = getattr(action, "tool_call_metadata", None)
        call_id = getattr(metadata, "tool_call_id", None)
        expected = pending.pop(call_id, None) if isinstance(call_id, str) else None
        if expected is None:
            return original(action)
        event = {key: value for key, value in expected.items() if key not in ("id", "cause", "timestamp")}
        counts["supplied"] += 1
        return event_from_dict(event)

    runtime.run_action = run_action
    return counts


def _append_user_message(text: str) -> None:
    """Make ``run_controller``'s replay log end with a user message (replayed after the last prefix action)."""
    import openhands.core.main as main
    from openhands.events.action import MessageAction
    from openhands.events.event import EventSource

    load = main.load_replay_log

    def load_with_prompt(path: str) -> Any:
        events, initial = load(path)
        message = MessageAction(content=text, wait_for_response=False)
        message._source = EventSource.USER
        return [*(events or []), message], initial

    main.load_replay_log = load_with_prompt


async def _run(request: dict[str, Any]) -> dict[str, Any]:
    from openhands.core.main import auto_continue_response, run_controller
    from openhands.core.setup import create_agent, create_runtime
    from openhands.events.action import MessageAction, NullAction
    from openhands.utils.async_utils import call_async_from_sync
    from openhands.utils.utils import create_registry_and_conversation_stats

    mode = request["mode"]
    config = _config(request)
    sid = request["sid"]
    runtime = None
    counts = {"supplied": 0}
    if mode == "continue":
        registry, _stats, config = create_registry_and_conversation_stats(config, sid, None)
        agent = create_agent(config, registry)
        runtime = create_runtime(config, registry, sid=sid, headless_mode=True, agent=agent)
        call_async_from_sync(runtime.connect)
        fresh = json.loads(Path(request["fresh_observations"]).read_text("utf-8"))
        counts = _supply_fresh(runtime, fresh)
        prompt_env = request.get("boundary_prompt_env")
        if prompt_env:
            _append_user_message(os.environ[prompt_env])
    initial = MessageAction(content=request["task"]) if mode == "record" else NullAction()
    state = await run_controller(config=config, initial_user_action=initial, sid=sid, runtime=runtime,
                                 fake_user_response_fn=auto_continue_response, headless_mode=True)
    agent_state = getattr(getattr(state, "agent_state", None), "value", None)
    iterations = getattr(getattr(state, "iteration_flag", None), "current_value", None)
    return {"agent_state": agent_state, "iterations": iterations, "last_error": getattr(state, "last_error", None),
            "supplied_observations": counts["supplied"]}


def main() -> int:
    for name in SKIPPED_OPTIONAL_MODULES:  # an import of it raises ImportError (the caller's optional fallback)
        sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    request = json.loads(Path(sys.argv[1]).read_text("utf-8"))
    result: dict[str, Any] = {"schema": SCHEMA, "mode": request.get("mode"), "error": None}
    code = 0
    try:
        if request.get("schema") != SCHEMA:
            raise ValueError(f"unsupported runner request schema {request.get('schema')!r}")
        result.update(asyncio.run(_run(request)))
    except BaseException as error:  # reported to forkpoint in the result file, then a non-zero exit
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc()[-4000:]
        code = 3
    Path(request["result"]).write_text(json.dumps(result, indent=2, default=str), "utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main())
