"""The wire-protocol registry: every registered ProtocolSpec is self-consistent, one set of names is used, and a
protocol is added with one module and one registry line (nothing else in forkpoint names it)."""

from __future__ import annotations

import ast
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from forkpoint.adapters import all_specs
from forkpoint.bridge.protocols import make_upstream, translations
from forkpoint.bridge.protocols.spec import ProtocolSpec
from forkpoint.bridge.translate.chat_stream import SSEDecoder
from forkpoint.bridge.translate.pipeline import prepare
from forkpoint.bridge.translate.sampling import SamplingPins, apply_pins
from forkpoint.bridge.upstream import NO_RETRIES, LocalStub
from forkpoint.core import protocols
from forkpoint.core.errors import ReplayError
from forkpoint.core.protocols import PROTOCOLS, STUB, UPSTREAMS, WireProtocol, by_upstream, load, outgoing_protocol

SRC = Path(__file__).resolve().parents[2] / "src" / "forkpoint"
#: the modules that once switched on protocol names: now they only look protocols up
NO_NAMES = ("run/request.py", "adapters/kit/continuation.py", "bridge/translate/pipeline.py",
            "bridge/translate/sampling.py", "bridge/tool_schemas.py", "bridge/protocols/translating.py",
            "bridge/protocols/__init__.py")
KEY = "sk-registry-consistency-0001"


def _answer(stub: Any, body: dict[str, Any]) -> tuple[int, bytes]:
    """POST ``body`` over loopback HTTP to a server whose one route is the stub's ``send``."""
    async def handle(request: web.Request) -> web.StreamResponse:
        response, _ = await stub.send(request, await request.json())
        return response

    async def run() -> tuple[int, bytes]:
        app = web.Application()
        app.router.add_post("/model", handle)
        async with TestServer(app, host="127.0.0.1") as server, ClientSession() as session, \
                session.post(server.make_url("/model"), json=body) as reply:
            return reply.status, await reply.read()

    return asyncio.run(run())


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_every_registered_protocol_spec_is_self_consistent(name: str) -> None:
    registered = PROTOCOLS[name]
    spec = load(name)
    # its line and its module agree: the spec is the module's SPEC, under the same name
    assert isinstance(spec, ProtocolSpec) and spec.name == name and spec.wire is registered
    assert registered.spec.startswith("forkpoint.bridge.protocols.") and registered.spec.endswith(":SPEC")
    assert load(name) is spec  # loaded once
    # the pass-through: the key from the registry's variable goes in headers, never in its repr
    upstream = spec.passthrough(registered.default_url, KEY, NO_RETRIES)
    assert upstream.url.startswith(registered.default_url) and KEY not in repr(upstream)  # type: ignore[attr-defined]
    assert upstream.name == registered.upstream
    # the stub answers the smallest request, whole and streamed; the streamed bytes round-trip through the codec
    stub = spec.stub()
    assert isinstance(stub, LocalStub)
    status, whole = _answer(stub, spec.sample_request)
    assert status == 200 and isinstance(json.loads(whole), dict)
    status, streamed = _answer(stub, {**spec.sample_request, "stream": True})
    payloads = SSEDecoder().feed(streamed)
    events = [(str(p.get("type", "")), p) for p in payloads if isinstance(p, dict)]
    assert status == 200 and events and b"".join(spec.encode(events)) == streamed
    # pins, tool schemas and the agent-facing error work on the protocol's own shapes
    pinned, changes = apply_pins(name, spec.sample_request, SamplingPins(model="pinned", temperature=0.5))
    assert pinned["model"] == "pinned" and {change.field for change in changes} >= {"model", "temperature"}
    assert spec.tool_schemas([]) == ([], ())
    assert spec.error(429, "slow down").status == 429
    # a translation to Chat goes to a registered protocol that answers other protocols
    if spec.chat is not None:
        assert spec.chat.target in PROTOCOLS and load(spec.chat.target).translating is not None
        assert spec.chat.id_prefix and prepare(name, spec.sample_request).body["messages"]
    if spec.translating is not None:
        translating = spec.translating_upstream(next(iter(PROTOCOLS)), registered.default_url, KEY, None,
                                                NO_RETRIES)
        assert KEY not in repr(translating)


def test_names_are_unique_and_every_agent_speaks_a_registered_protocol() -> None:
    assert all(isinstance(p, WireProtocol) and p.name == name for name, p in PROTOCOLS.items())
    upstream_names = [p.upstream for p in PROTOCOLS.values()]
    assert len(set(upstream_names)) == len(upstream_names) and STUB not in upstream_names
    assert not set(upstream_names) & (set(PROTOCOLS) - {p.name for p in PROTOCOLS.values() if not p.upstream_alias})
    assert list(UPSTREAMS) == [*upstream_names, STUB]
    assert all(by_upstream(p.upstream) is p for p in PROTOCOLS.values()) and by_upstream(STUB) is None
    prefixes = [chat.id_prefix for name in PROTOCOLS if (chat := load(name).chat) is not None]
    assert len(set(prefixes)) == len(prefixes)
    for agent in all_specs():
        assert agent.protocol in PROTOCOLS, agent.name
        assert all(name in PROTOCOLS for name in agent.more_upstreams), agent.name
    # the --upstream values and the translation record kept their strings
    assert (PROTOCOLS["anthropic-messages"].upstream, translations()[0]) == ("anthropic",
                                                                           ("anthropic-messages", "openai-chat"))


def test_outgoing_protocol_is_the_upstreams_unless_the_stub() -> None:
    assert outgoing_protocol("anthropic-messages", "stub") == "anthropic-messages"
    assert outgoing_protocol("anthropic-messages", None) == "anthropic-messages"
    assert outgoing_protocol("anthropic-messages", "openai-chat") == "openai-chat"
    assert outgoing_protocol("openai-chat", "anthropic") == "anthropic-messages"


def _name_literals(path: Path) -> list[tuple[int, str]]:
    names = set(PROTOCOLS) | {p.upstream for p in PROTOCOLS.values()}
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(path.read_text("utf-8")))
            if isinstance(node, ast.Constant) and node.value in names]


@pytest.mark.parametrize("module", NO_NAMES)
def test_no_protocol_name_outside_the_registry(module: str) -> None:
    """A protocol is known by the registry and its own module only: these modules look it up, never name it."""
    assert _name_literals(SRC / module) == [], module


def test_a_new_protocol_is_one_module_and_one_registry_line(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """What docs/architecture.md's "Adding a protocol" says: a module exporting SPEC plus one PROTOCOLS line, and
    the upstream choice, the stub, the pins and the tool schemas work for it (here a Chat dialect)."""
    (tmp_path / "example_dialect.py").write_text(
        "import dataclasses\n"
        "from forkpoint.bridge.protocols.openai_chat import SPEC as CHAT\n"
        "SPEC = dataclasses.replace(CHAT, name='example-dialect', translating=None)\n", "utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(PROTOCOLS, "example-dialect", WireProtocol(
        "example-dialect", "example_dialect:SPEC", "example", "EXAMPLE_API_KEY", None, "http://127.0.0.1:9/v1"))
    monkeypatch.setitem(UPSTREAMS, "example", protocols.UpstreamChoice("example", "EXAMPLE_API_KEY", None,
                                                                       "example-dialect"))
    try:
        assert isinstance(make_upstream("example-dialect", STUB, None, None), LocalStub)
        real = make_upstream("example-dialect", "example", None, KEY)
        assert real.url == "http://127.0.0.1:9/v1/chat/completions"  # type: ignore[attr-defined]
        assert outgoing_protocol("openai-chat", "example") == "example-dialect"
        assert apply_pins("example-dialect", {"model": "m"}, SamplingPins(seed=3))[0]["seed"] == 3
        with pytest.raises(ReplayError, match="translates only"):
            make_upstream("anthropic-messages", "example", None, KEY)
    finally:
        protocols._loaded.pop("example-dialect", None)
        sys.modules.pop("example_dialect", None)
