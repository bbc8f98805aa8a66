"""The conversation a resumed OpenHands SDK 1.58.2 sends first, built from the rebuilt prefix events (pure).

Measured on the real SDK (tests/fixtures/openhands-sdk/1.58.2/*/requests.jsonl): litellm sends OpenAI Chat
Completions ``messages`` =

    system     [text = SystemPromptEvent.system_prompt.text (+ dynamic_context when set)]
    user       [text = the MessageEvent's llm_message content]
    per model response (the ActionEvents sharing an llm_response_id):
      assistant  [text = the first action's thought] (no content without one), tool_calls = each action's
                 tool_call (id, type "function", function {name, arguments as sent})
      tool       per call, in log order: the observation's text parts (format.model_parts), tool_call_id, name
    agent MessageEvents: assistant [text]

Each message is projected to a canonical form (role, joined text, tool calls with parsed arguments,
tool_call_id, name); the chat gate compares the request's projection with this list (``ExpectedChat.of``).
"""

from __future__ import annotations

from forkpoint.adapters.kit.chat_message import project_call, project_text
from forkpoint.adapters.kit.jsondoc import as_object
from forkpoint.adapters.openhands_sdk.format import OBSERVATION_KINDS, model_parts
from forkpoint.core.model import JsonObject

#: events that never reach the model (bookkeeping): left out of the expected conversation
SILENT_KINDS = frozenset({"ConversationStateUpdateEvent", "PauseEvent", "TokenEvent", "ConversationErrorEvent",
                          "LLMCompletionLogEvent", "HookExecutionEvent"})


class PrefixError(ValueError):
    """The prefix holds something whose model message forkpoint does not model (refuse, never guess)."""


def expected_messages(events: list[JsonObject]) -> list[JsonObject]:
    """Projected messages for the rebuilt prefix events."""
    if not events or events[0].get("kind") != "SystemPromptEvent":
        raise PrefixError("the prefix does not open with a SystemPromptEvent (the system message)")
    messages: list[JsonObject] = []
    current: object = None
    for index, event in enumerate(events):
        kind = event.get("kind")
        if kind == "SystemPromptEvent":
            if index:
                raise PrefixError(f"a second SystemPromptEvent at {index}")
            text = str(as_object(event.get("system_prompt")).get("text", ""))
            dynamic = event.get("dynamic_context")
            if dynamic:
                raise PrefixError("the system prompt has a dynamic context (not modelled)")
            messages.append({"role": "system", "text": text})
        elif kind == "MessageEvent":
            current = None
            message = as_object(event.get("llm_message"))
            if event.get("extended_content") or event.get("activated_skills"):
                raise PrefixError(f"message {index} carries skill content (not modelled)")
            messages.append({"role": str(message.get("role")), "text": project_text(message.get("content"))})
        elif kind == "ActionEvent":
            rid = event.get("llm_response_id")
            call = as_object(event.get("tool_call"))
            projected = project_call({"id": call.get("id"), "type": "function",
                                      "function": {"name": call.get("name"), "arguments": call.get("arguments")}})
            if isinstance(rid, str) and rid == current and messages and messages[-1]["role"] == "assistant":
                messages[-1]["tool_calls"].append(projected)
            else:
                messages.append({"role": "assistant", "text": project_text(event.get("thought")),
                                 "tool_calls": [projected]})
            current = rid
        elif kind in OBSERVATION_KINDS:
            messages.append({"role": "tool", "text": "".join(model_parts(event)),
                             "tool_call_id": event.get("tool_call_id"), "name": event.get("tool_name")})
        elif kind not in SILENT_KINDS:
            raise PrefixError(f"event {index} ({kind}) has no model message forkpoint models")
    return messages
