"""OpenHands' Chat Completions profile for the one chat gate (pure data).

The runner feeds the prefix through OpenHands' ReplayManager, so there is no resume envelope: the first model
request must be EXACTLY the rebuilt conversation (``expected.expected_messages``: system, task, then every
replayed response's assistant message and the fresh observations as tool messages), ending at O'N, each message
projected by ``expected.project``. Nothing is stripped, so the forwarded body is the request itself.
"""

from __future__ import annotations

from forkpoint.adapters.kit.chat_message import project
from forkpoint.bridge.protocols.openai_chat import ChatProfile

PROFILE = ChatProfile(agent="OpenHands", project=lambda message, _index: project(message))
