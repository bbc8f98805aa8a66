"""ProtocolSpec: everything the bridge does differently per wire protocol, declared once as ``SPEC`` in
``forkpoint/bridge/protocols/<name>.py`` and found through ``forkpoint.core.protocols.PROTOCOLS`` (whose line
holds the protocol's names, key and URL variables: what is needed before anything is loaded).

Code outside a protocol's module never tests a protocol's name: it asks the registry for the spec
(``forkpoint.core.protocols.load``) and calls these fields.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from forkpoint.core.model import JsonObject
from forkpoint.core.protocols import WireProtocol, wire

if TYPE_CHECKING:
    from aiohttp import web

    from forkpoint.bridge.protocols import Patience
    from forkpoint.bridge.subagents import SubagentWire
    from forkpoint.bridge.translate.common import ChatOptions, Translated
    from forkpoint.bridge.translate.pipeline import Prepared
    from forkpoint.bridge.translate.sampling import Change, Put, SamplingPins
    from forkpoint.bridge.translate.sequencer import BlockSequencer
    from forkpoint.bridge.upstream import Upstream

#: one streamed answer as (SSE event name, data): what a codec encodes
Events = Iterable[tuple[str, JsonObject]]
#: (tool definitions of a request) -> (them as OpenAI Chat function tools, what the conversion dropped or changed)
ToolSchemas = Callable[[list[Any]], tuple[list[JsonObject], tuple[str, ...]]]


@dataclass(frozen=True)
class ChatTranslation:
    """How an agent speaking this protocol is answered by a Chat Completions server (``--upstream openai-chat``):
    its request to Chat, the Chat answer (streamed or whole) back to it, and the id its answers get."""

    #: the protocol the translated request speaks (its pins are applied in that protocol)
    target: str
    to_chat: Callable[[JsonObject, ChatOptions], Translated]
    #: (prepared request, answer id) -> the streaming translator of the Chat answer
    stream: Callable[[Prepared, str], BlockSequencer]
    #: (Chat completion, prepared request, answer id) -> the agent's answer and its losses
    whole: Callable[[JsonObject, Prepared, str], tuple[JsonObject, list[str]]]
    #: the prefix of the answer ids forkpoint makes up (``msg_forkpoint_``...)
    id_prefix: str
    #: (request path under the bridge token, agent body) -> the body with what the protocol carries in the path
    #: folded in, for ``to_chat`` (the Gemini API's model and streaming choice); None: the body says it all
    route: Callable[[str, JsonObject], JsonObject] | None = None
    #: a route the protocol's ``sample_request`` is valid on (the registry's consistency test translates it)
    sample_route: str = ""


@dataclass(frozen=True)
class ProtocolSpec:
    """One wire protocol on the bridge."""

    #: the registry key (``forkpoint.core.protocols.PROTOCOLS``)
    name: str
    #: (base URL, key, patience: retries and timeouts) -> the pass-through upstream
    passthrough: Callable[[str, str, Patience], Upstream]
    #: the local stub that answers a validated request itself (``--upstream stub``)
    stub: Callable[[], Upstream]
    #: the SSE codec: a streamed answer's events -> its bytes (ScriptedModel and the stub stream the same)
    encode: Callable[[Events], list[bytes]]
    #: sets the protocol's own fields for the pins that differ per protocol (``sampling.apply_pins`` calls it)
    pins: Callable[[JsonObject, SamplingPins, Put, list[Change]], None]
    #: ``--record-tool-schemas``: the request's tools in OpenAI Chat form
    tool_schemas: ToolSchemas
    #: (status, message) -> an error response its agents parse (a translating upstream's failure, told to them)
    error: Callable[[int, str], web.Response]
    #: the smallest valid request (the registry's consistency test sends it to the stub)
    sample_request: JsonObject
    #: (status, message) -> the error its agents do NOT retry (``invalid_request_error``): the bridge's answer once
    #: it stopped forwarding after identical upstream failures
    refusal: Callable[[int, str], web.Response]
    #: the agent side of a translation to Chat, when forkpoint has one
    chat: ChatTranslation | None = None
    #: ``"module:attr"`` of the upstream class with which this protocol's server answers an agent of ANOTHER
    #: protocol, called ``(agent protocol, URL, key, pins, retry, read/answer timeouts)``, when forkpoint
    #: translates to it (Chat)
    translating: str | None = None
    #: how the bridge proves a sub-agent conversation descends from a forwarded answer (``bridge.subagents``);
    #: None: sub-agent requests stay refused
    subagents: SubagentWire | None = None

    def translating_upstream(self, agent: str, url: str, key: str, pins: SamplingPins | None,
                             patience: Patience) -> Upstream:
        """The translating upstream (imported now: only a translating run loads the translators)."""
        assert self.translating is not None, f"{self.name} answers no other protocol"
        module, _, attr = self.translating.partition(":")
        build: Callable[..., Upstream] = getattr(importlib.import_module(module), attr)
        return build(agent, url, key, pins, patience.retry, **patience.options())

    @property
    def wire(self) -> WireProtocol:
        """Its registry line: ``--upstream`` value, key and URL variables, default URL."""
        return wire(self.name)
