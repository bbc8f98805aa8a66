"""The wire-protocol registry: one line per protocol the bridge speaks, its implementation loaded on first use.

A protocol has ONE name everywhere (an agent spec's ``protocol``, the gates, the sampling pins, the translators,
``tool-schemas.json``'s ``source_protocol``): the registry key. Its ``--upstream`` value is the one alias, kept
here for the CLI and the result documents (``anthropic`` for ``anthropic-messages``). Everything else about a
protocol (upstreams, stub, SSE codec, pins, tool schemas, translation to and from Chat) is its
:class:`forkpoint.bridge.protocols.spec.ProtocolSpec`, named by ``"module:attr"`` and imported only when a run
needs it: this module imports nothing heavy, so request validation and ``--prepare-only`` load no bridge.
Adding a protocol: one ``forkpoint/bridge/protocols/<name>.py`` exporting ``SPEC`` and one line in ``PROTOCOLS``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from forkpoint.bridge.protocols.spec import ProtocolSpec

#: the ``--upstream`` value for the bridge's own stub of the agent's protocol (a zero-cost acceptance check)
STUB = "stub"


@dataclass(frozen=True)
class WireProtocol:
    """One registered protocol: what is known without loading it (names, where its key and URL come from)."""

    #: the canonical name
    name: str
    #: ``"module:attr"`` of its ``ProtocolSpec``
    spec: str
    #: its ``--upstream`` value (and in result documents); None: the canonical name
    upstream_alias: str | None = None
    #: forkpoint's own environment variables for the upstream key and base URL (never passed to the agent)
    key_env: str | None = None
    url_env: str | None = None
    default_url: str = ""

    @property
    def upstream(self) -> str:
        return self.upstream_alias or self.name


@dataclass(frozen=True)
class UpstreamChoice:
    """One ``--upstream`` value: a registered protocol's real upstream, or the stub (no key, no URL)."""

    name: str
    key_env: str | None = None
    url_env: str | None = None
    #: the protocol it speaks; None for the stub (it speaks the agent's own)
    protocol: str | None = None


PROTOCOLS: dict[str, WireProtocol] = {p.name: p for p in (
    WireProtocol("anthropic-messages", "forkpoint.bridge.protocols.anthropic:SPEC", "anthropic",
                 "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
    WireProtocol("openai-responses", "forkpoint.bridge.protocols.openai_responses:SPEC", None,
                 "OPENAI_API_KEY", "OPENAI_BASE_URL", "https://api.openai.com/v1"),
    WireProtocol("openai-chat", "forkpoint.bridge.protocols.openai_chat:SPEC", None,
                 "OPENAI_API_KEY", "OPENAI_BASE_URL", "https://api.openai.com/v1"),
    WireProtocol("google-generate-content", "forkpoint.bridge.protocols.gemini:SPEC", "gemini",
                 "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL", "https://generativelanguage.googleapis.com"),
)}

STUB_CHOICE = UpstreamChoice(STUB)
#: every ``--upstream`` value, in the order messages list them (derived: the registry is the only table)
UPSTREAMS: dict[str, UpstreamChoice] = {
    **{p.upstream: UpstreamChoice(p.upstream, p.key_env, p.url_env, p.name) for p in PROTOCOLS.values()},
    STUB: STUB_CHOICE}
_loaded: dict[str, ProtocolSpec] = {}


def wire(name: str) -> WireProtocol:
    """The registered protocol ``name``; a ``KeyError`` naming the known ones otherwise."""
    try:
        return PROTOCOLS[name]
    except KeyError:
        raise KeyError(f"no wire protocol {name!r} (known: {', '.join(PROTOCOLS)})") from None


def load(name: str) -> ProtocolSpec:
    """The protocol's ``ProtocolSpec`` (its module is imported on the first call)."""
    spec = _loaded.get(name)
    if spec is None:
        module, _, attr = wire(name).spec.partition(":")
        spec = _loaded[name] = getattr(importlib.import_module(module), attr)
    return spec


def by_upstream(upstream: str | None) -> WireProtocol | None:
    """The protocol whose real upstream ``--upstream`` names (None for the stub, no choice or an unknown name)."""
    return next((p for p in PROTOCOLS.values() if p.upstream == upstream), None)


def outgoing_protocol(agent_protocol: str, upstream: str | None) -> str:
    """The protocol of the requests that leave the bridge: the chosen upstream's (a translating upstream speaks
    its own), else (the stub, or no choice) the agent's. Pins are applied in this protocol."""
    chosen = by_upstream(upstream)
    return agent_protocol if chosen is None else chosen.name
