"""SWE-agent ``.traj`` -> OpenAI chat messages (for `forkpoint export`; pure).

The ``history`` list is the chat SWE-agent sent (system, instance template, assistant thought + action,
observations); its chat fields are copied like mini-swe-agent's, ``thinking_blocks`` becoming reasoning.
"""

from __future__ import annotations

import orjson

from forkpoint.export.chat import Conversation, from_chat_rows


def to_chat(data: bytes) -> Conversation:
    document = orjson.loads(data)
    return from_chat_rows(document.get("history") if isinstance(document, dict) else None)
