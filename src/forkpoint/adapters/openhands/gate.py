"""The fail-closed check of a continued OpenHands' model requests (OpenAI Chat Completions via litellm; pure).

The runner feeds the prefix through OpenHands' ReplayManager, so there is no resume envelope: the first model
request must be EXACTLY the rebuilt conversation (``expected.ExpectedConversation``: system, task, then every
replayed response's assistant message and the fresh observations as tool messages), ending at O'N. Later requests
must repeat that prefix unchanged and may only add messages after it. A refusal names the first differing message.
Nothing is stripped, so the forwarded body is the request itself.
"""

from __future__ import annotations

from typing import Any

from forkpoint.adapters.openhands.expected import ExpectedConversation, project
from forkpoint.bridge.gate import Gate, Refusal, Verdict, checked, open_request
from forkpoint.hashing import canonical_sha256
from forkpoint.model import JsonObject


def _compare(expected: ExpectedConversation, body: Any, *, first: bool, facts: JsonObject) -> JsonObject:
    request, messages = open_request(body, shape="the request has no messages list", objects=False)
    count = len(expected.messages)
    projected = [project(m) for m in messages]
    for index in range(min(count, len(projected))):
        if canonical_sha256(projected[index]) != expected.message_sha256[index]:
            detail = _explain(expected.messages[index], projected[index])
            raise Refusal(f"messages[{index}] differs from the rebuilt prefix: {detail}")
    if len(projected) < count:
        missing = expected.messages[len(projected)]["role"]
        raise Refusal(f"the request has {len(projected)} messages, the rebuilt prefix {count}: "
                      f"messages[{len(projected)}] ({missing}) is missing")
    if first and len(projected) != count:
        raise Refusal(f"the first request must end at the last fresh observation (message {count - 1}), but it has "
                      f"{len(projected) - count} more message(s)")
    if not first and len(projected) == count:
        raise Refusal("a later request adds nothing after the rebuilt prefix")
    if canonical_sha256(projected[:count]) != expected.prefix_sha256:
        raise Refusal("the canonical prefix hash differs from the rebuilt prefix")
    facts["message_count"] = count
    facts["prefix_sha256"] = expected.prefix_sha256
    if not first:
        facts["continuation_messages"] = len(projected) - count
    return request


def _explain(want: JsonObject, got: JsonObject) -> str:
    if want.get("role") != got.get("role"):
        return f"role is {got.get('role')!r}, expected {want.get('role')!r}"
    for key in ("tool_call_id", "name", "tool_calls", "text"):
        if want.get(key) != got.get(key):
            return f"its {key} differs"
    return "it differs outside the compared fields"


class OpenHandsGate(Gate):
    """Chat Completions requests of a continued OpenHands (litellm POSTs ``<base_url>/chat/completions``)."""

    name = "openai-chat"
    model_routes = frozenset({"/v1/chat/completions", "/chat/completions"})

    def __init__(self, expected: ExpectedConversation) -> None:
        self.expected = expected

    def first(self, body: Any) -> Verdict:
        return checked(self.expected.profile, True,
                       lambda facts: _compare(self.expected, body, first=True, facts=facts))

    def later(self, body: Any) -> Verdict:
        return checked(self.expected.profile, False,
                       lambda facts: _compare(self.expected, body, first=False, facts=facts))
