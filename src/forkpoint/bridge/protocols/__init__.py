"""The bridge's wire protocols and the upstream registry (modules load lazily: a run imports only its own).

One module per protocol: ``anthropic`` (Claude Code), ``openai_responses`` (Codex), ``openai_chat`` (OpenCode, Pi,
mini-swe-agent, OpenHands) with its upstream, its stub and its SSE encoding; ``chat_gate`` is the one Chat
Completions gate. ``make_upstream`` replaces the per-adapter upstream tables: an agent names its native protocol
and the run's ``--upstream`` choice. A translating upstream (an agent's protocol to another upstream protocol) is
one more registry entry keyed by (agent protocol, upstream name).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from forkpoint.bridge.translate.retry import RetryPolicy
from forkpoint.bridge.upstream import ANSWER_TIMEOUT_S, IDLE_TIMEOUT_S, NO_RETRIES, Upstream
from forkpoint.core.errors import ErrorKind, ReplayError

if TYPE_CHECKING:  # the translators load only for a translating run
    from aiohttp import web

    from forkpoint.bridge.translate.pipeline import AgentProtocol
    from forkpoint.bridge.translate.sampling import SamplingPins

STUB = "stub"


@dataclass(frozen=True)
class Patience:
    """How a real upstream's failures are retried (``--upstream-retries``) and how long it may take: no byte for
    ``idle_s`` (``--upstream-idle-timeout``), no answer end within ``answer_s`` (``--answer-timeout``)."""

    retry: RetryPolicy = field(default=NO_RETRIES)
    idle_s: float = IDLE_TIMEOUT_S
    answer_s: float = ANSWER_TIMEOUT_S

    def options(self) -> dict[str, float]:
        return {"read_timeout_s": self.idle_s, "answer_timeout_s": self.answer_s}


def _anthropic(url: str | None, key: str | None, patience: Patience) -> Upstream:
    from forkpoint.bridge.protocols import anthropic

    if key is None:
        return anthropic.AnthropicStubUpstream()
    return anthropic.AnthropicUpstream(url or "", key, retry=patience.retry, **patience.options())


def _responses(url: str | None, key: str | None, patience: Patience) -> Upstream:
    from forkpoint.bridge.protocols import openai_responses

    if key is None:
        return openai_responses.ResponsesStubUpstream()
    return openai_responses.OpenAIResponsesUpstream(url or "", key, retry=patience.retry, **patience.options())


def _chat(url: str | None, key: str | None, patience: Patience) -> Upstream:
    from forkpoint.bridge.protocols import openai_chat

    if key is None:
        return openai_chat.ChatStubUpstream()
    return openai_chat.OpenAIChatUpstream(url or "", key, retry=patience.retry, **patience.options())


@dataclass(frozen=True)
class UpstreamKind:
    """One ``--upstream`` choice: the wire protocol it speaks; ``build(url, key, patience)`` is the pass-through,
    ``build(None, None, patience)`` the stub of that protocol (a stub never fails: nothing to retry)."""

    protocol: str
    build: Callable[[str | None, str | None, Patience], Upstream]
    default_url: str
    key_env: str


#: ``--upstream`` name -> the upstream (the agents' wire protocols: anthropic-messages, openai-responses, openai-chat)
UPSTREAMS: dict[str, UpstreamKind] = {
    "anthropic": UpstreamKind("anthropic-messages", _anthropic, "https://api.anthropic.com", "ANTHROPIC_API_KEY"),
    "openai-responses": UpstreamKind("openai-responses", _responses, "https://api.openai.com/v1", "OPENAI_API_KEY"),
    "openai-chat": UpstreamKind("openai-chat", _chat, "https://api.openai.com/v1", "OPENAI_API_KEY"),
}


TranslatingBuild = Callable[[str | None, str | None, "SamplingPins | None", Patience], Upstream]


def _translating(agent: AgentProtocol) -> TranslatingBuild:
    def build(url: str | None, key: str | None, pins: SamplingPins | None, patience: Patience) -> Upstream:
        from forkpoint.bridge.protocols.translating import TranslatingChatUpstream

        return TranslatingChatUpstream(agent, url or "", key or "", pins, patience.retry, **patience.options())

    return build


#: (agent protocol, ``--upstream`` name) -> a translating upstream (the agent's protocol to the upstream's)
TRANSLATING: dict[tuple[str, str], TranslatingBuild] = {
    ("anthropic-messages", "openai-chat"): _translating("anthropic"),
    ("openai-responses", "openai-chat"): _translating("openai-responses"),
}


def refusal_for(protocol: str) -> Callable[[int, str], web.Response]:
    """The error an agent speaking ``protocol`` does not retry (``invalid_request_error`` in its shape): what the
    bridge answers once it stopped forwarding."""
    from forkpoint.bridge.protocols.openai import openai_error_response
    from forkpoint.bridge.upstream import error_response

    if protocol == "anthropic-messages":
        return lambda status, message: error_response(status, "invalid_request_error", message)
    return lambda status, message: openai_error_response(status, "invalid_request_error", message, "upstream_failed")


def make_upstream(protocol: str, upstream_name: str, url: str | None, key: str | None,
                  pins: SamplingPins | None = None, retry: RetryPolicy = NO_RETRIES,
                  patience: Patience | None = None) -> Upstream:
    """The upstream for an agent speaking ``protocol`` when the run asked for ``upstream_name`` (``stub``: the stub
    of the agent's own protocol); a missing key or an unsupported pair is a configuration error. ``pins``: the
    model and sampling pins a translating upstream applies to the body it translated (a pass-through upstream gets
    them from the bridge's post-validation hook instead). ``retry``: how failures before the first byte reached the
    agent are retried (``--upstream-retries``; without it the upstream calls once); ``patience``, when given, holds
    that policy and the idle and answer timeouts (``retry`` is then ignored)."""
    patience = patience or Patience(retry)
    native = next((kind for kind in UPSTREAMS.values() if kind.protocol == protocol), None)
    if native is None:
        known = ", ".join(sorted({kind.protocol for kind in UPSTREAMS.values()}))
        raise ReplayError(ErrorKind.CONFIGURATION, f"no bridge protocol {protocol!r} (known: {known})")
    if upstream_name == STUB:
        return native.build(None, None, patience)
    kind = UPSTREAMS.get(upstream_name)
    if kind is None:
        raise ReplayError(ErrorKind.CONFIGURATION, f"unknown upstream {upstream_name!r} (known: "
                                                   f"{', '.join([*UPSTREAMS, STUB])})")
    translating = TRANSLATING.get((protocol, upstream_name))
    if kind.protocol != protocol and translating is None:
        pairs = ", ".join(f"{agent} -> {name}" for agent, name in TRANSLATING)
        raise ReplayError(ErrorKind.CONFIGURATION, f"an agent speaking {protocol} cannot use the {upstream_name} "
                                                   f"upstream (forkpoint translates only {pairs})")
    if not key:
        raise ReplayError(ErrorKind.CONFIGURATION, f"the {upstream_name} upstream needs {kind.key_env} in "
                                                   "forkpoint's environment (or use --upstream stub)")
    if translating is not None:
        return translating(url or kind.default_url, key, pins, patience)
    return kind.build(url or kind.default_url, key, patience)
