"""SWE-agent ``.traj`` -> OpenAI chat messages (for `forkpoint export`; pure).

The ``history`` list is the chat SWE-agent sent (system, instance template, assistant thought + action,
observations); its chat fields are copied like mini-swe-agent's, ``thinking_blocks`` becoming reasoning.
"""

from __future__ import annotations

import orjson

from forkpoint.adapters.mini_swe_agent.messages import chat_message
from forkpoint.export.chat import Conversation


def to_chat(data: bytes) -> Conversation:
    document = orjson.loads(data)
    conversation = Conversation()
    rows = document.get("history") if isinstance(document, dict) else None
    for message in rows if isinstance(rows, list) else []:
        converted = chat_message(message, conversation)
        if converted is not None:
            conversation.messages.append(converted)
    return conversation
