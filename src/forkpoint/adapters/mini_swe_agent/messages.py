"""mini-swe-agent trajectory JSON -> OpenAI chat messages (for `forkpoint export`; pure).

Its ``messages`` are already the chat the model saw (system, task, assistant actions, observations as user or
``tool`` messages): they are copied with their chat fields only (mini's ``extra`` bookkeeping dropped), content
flattened to text. Roles chat does not know (mini 1.x's ``exit``) are left out and noted.
"""

from __future__ import annotations

import orjson

from forkpoint.export.chat import Conversation, from_chat_rows


def to_chat(data: bytes) -> Conversation:
    document = orjson.loads(data)
    conversation = from_chat_rows(document.get("messages") if isinstance(document, dict) else None)
    info = document.get("info") if isinstance(document, dict) else None
    config = info.get("config") if isinstance(info, dict) else None
    model = config.get("model") if isinstance(config, dict) else None
    if isinstance(model, dict) and isinstance(model.get("model_name"), str):
        conversation.model = model["model_name"]
    return conversation
