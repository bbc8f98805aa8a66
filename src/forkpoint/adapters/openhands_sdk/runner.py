# mypy: disable-error-code="import-not-found"
"""forkpoint's companion runner for the OpenHands SDK: runs INSIDE the SDK's venv, never in forkpoint.

    <openhands-sdk venv>/bin/python runner.py REQUEST.json

Protocol ``forkpoint.openhands-sdk-runner/v1`` (docs/adapters/openhands-sdk.md). REQUEST.json::

    {"schema": "forkpoint.openhands-sdk-runner/v1",
     "mode": "record" | "replay" | "continue",
     "workspace": "/abs/workspace",          # the LocalWorkspace (commands and edits run there)
     "persistence_dir": "/abs/dir",          # the conversations folder (``<dir>/<id hex>/`` holds one)
     "conversation_id": "uuid",              # replay/continue: the conversation to resume (continue) or scratch
     "tools": ["terminal", ...],             # record: the agent's tools
     "agent": {...},                         # replay/continue: the recorded agent (base_state.json's "agent")
     "actions": "/abs/actions.json",         # replay: the ActionEvents to re-run, in order
     "task": "...",                          # record: the first user message
     "max_iterations": N,
     "llm": {"model": "openai/x", "base_url": "http://127.0.0.1:P/v1", "api_key_env": "NAME"},
     "boundary_prompt_env": "NAME",          # continue only, optional: a user message sent before run()
     "out": "/abs/out.json",                 # replay: fresh events; record/continue: the conversation bundle
     "result": "/abs/result.json"}

RESULT: {"schema", "mode", "execution_status", "events", "run_error", "error_codes", "error", "traceback"}
(``run_error``: ``run()`` raised, the conversation is still written; ``error``: the runner itself failed).

``replay`` re-runs each recorded ActionEvent with the SDK's own tool (``Agent._execute_action_event``: the same
executor a live step uses) in a scratch conversation on the workspace; a call the SDK could not turn into an
action (``action`` null: unknown tool, invalid arguments) goes through its own validation again
(``Agent._get_action_event``), which answers with the AgentErrorEvent; the model is never called. ``continue``
resumes the rebuilt conversation from its persistence dir (the SDK's own resume: base_state.json + events/), the
recorded agent with its LLM pointed at forkpoint's bridge, and runs it until it finishes or hits max_iterations.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import uuid
from pathlib import Path
from typing import Any

SCHEMA = "forkpoint.openhands-sdk-runner/v1"
BUNDLE = "forkpoint.openhands-sdk-conversation/v1"


#: the recorded LLM's sampling settings a continuation keeps (its provider, endpoint and key are forkpoint's)
KEPT_LLM_SETTINGS = ("temperature", "top_p", "top_k", "max_output_tokens", "reasoning_effort",
                     "extended_thinking_budget", "caching_prompt", "drop_params")


def _llm(request: dict[str, Any]) -> Any:
    """Chat Completions at ``llm.base_url`` (``api_mode`` chat: the SDK would pick the Responses API for some
    models on its own), with the recorded agent's sampling settings when there is one. A release whose ``LLM``
    has no ``api_mode`` (1.x before it, e.g. 1.0.0) picks the API by the model's name alone: it runs when that
    pick is Chat Completions, and is refused (not sent to the wrong API) when it is not."""
    from openhands.sdk import LLM
    from pydantic import SecretStr

    llm = request["llm"]
    recorded = (request.get("agent") or {}).get("llm") or {}
    kept = {key: recorded[key] for key in KEPT_LLM_SETTINGS if key in recorded and key in LLM.model_fields
            and recorded[key] is not None}
    pinned = {"api_mode": "chat"} if "api_mode" in LLM.model_fields else {}
    made = LLM(**kept, **pinned, model=llm["model"], base_url=llm["base_url"], usage_id="agent",
               api_key=SecretStr(os.environ.get(llm["api_key_env"], "forkpoint")), num_retries=0)
    if not pinned and made.uses_responses_api():
        raise RuntimeError(f"this SDK's LLM has no api_mode and sends {llm['model']!r} to the Responses API "
                           "(forkpoint's bridge speaks Chat Completions)")
    return made


def _agent(request: dict[str, Any]) -> Any:
    import openhands.tools.file_editor
    import openhands.tools.task_tracker
    import openhands.tools.terminal  # noqa: F401  (registers the tools)
    from openhands.sdk import Agent, Tool

    if request["mode"] == "record":
        return Agent(llm=_llm(request), tools=[Tool(name=name) for name in request["tools"]])
    recorded = dict(request["agent"])
    recorded.pop("llm", None)
    return Agent.model_validate({**recorded, "llm": _llm(request).model_dump()})


def _bundle(conversation: Any) -> dict[str, Any]:
    """The conversation as forkpoint's bundle: base_state.json and every event file, in log order."""
    from openhands.sdk.conversation.persistence_const import BASE_STATE, EVENT_NAME_RE, EVENTS_DIR

    folder = Path(conversation.state.persistence_dir)
    names = sorted((p.name for p in (folder / EVENTS_DIR).iterdir() if EVENT_NAME_RE.match(p.name)),
                   key=lambda name: int(EVENT_NAME_RE.match(name)["idx"]))
    return {"schema": BUNDLE, "base_state": json.loads((folder / BASE_STATE).read_text("utf-8")),
            "events": [json.loads((folder / EVENTS_DIR / name).read_text("utf-8")) for name in names]}


def _conversation(request: dict[str, Any], agent: Any) -> Any:
    from openhands.sdk import Conversation

    conversation_id = uuid.UUID(request["conversation_id"]) if request.get("conversation_id") else None
    return Conversation(agent=agent, workspace=request["workspace"], persistence_dir=request["persistence_dir"],
                        conversation_id=conversation_id, max_iteration_per_run=int(request["max_iterations"]),
                        visualizer=None)


def _replay(request: dict[str, Any], conversation: Any) -> list[dict[str, Any]]:
    """Each recorded action re-run by its own SDK tool, in order; the events it produced, as the SDK dumps them,
    with the tool message text the model would see (``to_llm_message``)."""
    from openhands.sdk.event import ActionEvent

    conversation._ensure_agent_ready()
    agent = conversation.agent
    out = []
    for raw in json.loads(Path(request["actions"]).read_text("utf-8")):
        action = ActionEvent.model_validate(raw)
        if action.action is None:  # the SDK refused the call: its own validation again (AgentErrorEvent)
            emitted: list[Any] = []
            agent._get_action_event(tool_call=action.tool_call, conversation=conversation,
                                    llm_response_id=action.llm_response_id, on_event=emitted.append)
            produced = [e for e in emitted if type(e).__name__ == "AgentErrorEvent"]
            accepted = [e for e in emitted if type(e).__name__ == "ActionEvent" and e.action is not None]
            for event in accepted:  # this SDK accepts the call now: it runs
                produced.extend(agent._execute_action_event(conversation, event))
        else:
            produced = agent._execute_action_event(conversation, action)
        for event in produced:
            message = event.to_llm_message()
            texts = [getattr(part, "text", None) for part in message.content]
            out.append({"event": event.model_dump(mode="json"), "llm_text": texts, "action_id": action.id,
                        "tool_call_id": action.tool_call_id})
    return out


def _run(request: dict[str, Any]) -> dict[str, Any]:
    mode = request["mode"]
    agent = _agent(request)
    conversation = _conversation(request, agent)
    try:
        if mode == "replay":
            events = _replay(request, conversation)
            Path(request["out"]).write_text(json.dumps(events), "utf-8")
            return {"events": len(events)}
        if mode == "record":
            conversation.send_message(request["task"])
        elif request.get("boundary_prompt_env"):
            conversation.send_message(os.environ[request["boundary_prompt_env"]])
        run_error = None
        try:
            conversation.run()
        except Exception as error:  # the conversation is kept (and reported): e.g. the bridge's step budget
            run_error = f"{type(error).__name__}: {error}"[:4000]
        codes = [str(getattr(e, "code", "")) for e in conversation.state.events
                 if type(e).__name__ == "ConversationErrorEvent"]
        status = str(getattr(conversation.state.execution_status, "value", conversation.state.execution_status))
        bundle = _bundle(conversation)
        Path(request["out"]).write_text(json.dumps(bundle), "utf-8")
        return {"execution_status": status, "events": len(bundle["events"]), "run_error": run_error,
                "error_codes": codes}
    finally:
        conversation.close()


def main() -> int:
    request = json.loads(Path(sys.argv[1]).read_text("utf-8"))
    result: dict[str, Any] = {"schema": SCHEMA, "mode": request.get("mode"), "error": None}
    code = 0
    try:
        if request.get("schema") != SCHEMA:
            raise ValueError(f"unsupported runner request schema {request.get('schema')!r}")
        result.update(_run(request))
    except BaseException as error:  # reported to forkpoint in the result file, then a non-zero exit
        result["error"] = f"{type(error).__name__}: {error}"
        result["traceback"] = traceback.format_exc()[-4000:]
        code = 3
    Path(request["result"]).write_text(json.dumps(result, indent=2, default=str), "utf-8")
    return code


if __name__ == "__main__":
    sys.exit(main())
