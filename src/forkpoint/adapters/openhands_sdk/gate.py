"""The OpenHands SDK's Chat Completions profile for the one chat gate (pure data).

The SDK resumes the rebuilt conversation from its persistence dir, so there is no resume envelope: the first
model request must be EXACTLY the rebuilt conversation (envelope.expected_messages), each message projected by
``envelope.project``. Nothing is stripped, so the forwarded body is the request itself.
"""

from __future__ import annotations

from forkpoint.adapters.kit.chat_message import project
from forkpoint.bridge.protocols.openai_chat import ChatProfile

PROFILE = ChatProfile(agent="OpenHands SDK", project=lambda message, _index: project(message))
