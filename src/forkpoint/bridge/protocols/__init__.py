"""The bridge's wire protocols: one module per protocol, each exporting its ``ProtocolSpec`` as ``SPEC``
(``anthropic``: Claude Code; ``openai_responses``: Codex; ``openai_chat``: OpenCode, Pi, mini-swe-agent,
OpenHands, with the one Chat Completions gate), registered in ``forkpoint.core.protocols.PROTOCOLS`` and loaded
lazily: a run imports only its own. ``make_upstream`` picks the upstream from an agent's protocol and the run's
``--upstream`` choice; a translating upstream (an agent's protocol to another upstream protocol) exists where the
agent's spec has a ``chat`` translation and the upstream's spec a ``translating`` upstream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from forkpoint.bridge.translate.retry import RetryPolicy
from forkpoint.bridge.upstream import ANSWER_TIMEOUT_S, IDLE_TIMEOUT_S, NO_RETRIES, Upstream
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.protocols import PROTOCOLS, STUB, UPSTREAMS, by_upstream, load

if TYPE_CHECKING:  # the translators load only for a translating run
    from aiohttp import web

    from forkpoint.bridge.translate.sampling import SamplingPins


@dataclass(frozen=True)
class Patience:
    """How a real upstream's failures are retried (``--upstream-retries``) and how long it may take: no byte for
    ``idle_s`` (``--upstream-idle-timeout``), no answer end within ``answer_s`` (``--answer-timeout``)."""

    retry: RetryPolicy = field(default=NO_RETRIES)
    idle_s: float = IDLE_TIMEOUT_S
    answer_s: float = ANSWER_TIMEOUT_S

    def options(self) -> dict[str, float]:
        return {"read_timeout_s": self.idle_s, "answer_timeout_s": self.answer_s}


def translations() -> list[tuple[str, str]]:
    """Every (agent protocol, ``--upstream`` value) forkpoint translates (loads every protocol: for messages)."""
    return [(agent, wire.upstream) for agent in PROTOCOLS for wire in PROTOCOLS.values()
            if agent != wire.name and load(agent).chat is not None and load(wire.name).translating is not None]


def refusal_for(protocol: str) -> Callable[[int, str], web.Response]:
    """The error an agent speaking ``protocol`` does not retry (``invalid_request_error`` in its shape): what the
    bridge answers once it stopped forwarding."""
    return load(protocol).refusal


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
    if protocol not in PROTOCOLS:
        raise ReplayError(ErrorKind.CONFIGURATION, f"no bridge protocol {protocol!r} (known: "
                                                   f"{', '.join(sorted(PROTOCOLS))})")
    agent = load(protocol)
    if upstream_name == STUB:
        return agent.stub()
    chosen = by_upstream(upstream_name)
    if chosen is None:
        raise ReplayError(ErrorKind.CONFIGURATION, f"unknown upstream {upstream_name!r} (known: "
                                                   f"{', '.join(UPSTREAMS)})")
    target = load(chosen.name)
    translating = chosen.name != protocol
    if translating and (agent.chat is None or target.translating is None):
        pairs = ", ".join(f"{agent} -> {name}" for agent, name in translations())
        raise ReplayError(ErrorKind.CONFIGURATION, f"an agent speaking {protocol} cannot use the {upstream_name} "
                                                   f"upstream (forkpoint translates only {pairs})")
    if not key:
        raise ReplayError(ErrorKind.CONFIGURATION, f"the {upstream_name} upstream needs {chosen.key_env} in "
                                                   "forkpoint's environment (or use --upstream stub)")
    if translating:
        return target.translating_upstream(protocol, url or chosen.default_url, key, pins, patience)
    return target.passthrough(url or chosen.default_url, key, patience)
