"""ProtocolSpec: every spec registered in ``forkpoint.core.protocols.PROTOCOLS`` is self-consistent (its line and its
module agree, its upstreams build, its stub answers, its codec round-trips, its pins, tool schemas, error and
translation work on its own shapes): a new protocol's module is checked like the others."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from forkpoint.bridge.protocols import Patience
from forkpoint.bridge.protocols.spec import ProtocolSpec
from forkpoint.bridge.translate.chat_stream import SSEDecoder
from forkpoint.bridge.translate.pipeline import prepare
from forkpoint.bridge.translate.sampling import SamplingPins, apply_pins
from forkpoint.bridge.upstream import NO_RETRIES, LocalStub
from forkpoint.core.protocols import PROTOCOLS, load

KEY = "sk-registry-consistency-0001"


def _answer(stub: Any, body: dict[str, Any]) -> tuple[int, bytes]:
    """POST ``body`` over loopback HTTP to a server whose one route is the stub's ``send``: a streamed request
    (``stream`` in the body) to a streaming path too (the Gemini API says "stream" in the path, not the body)."""
    async def handle(request: web.Request) -> web.StreamResponse:
        response, _ = await stub.send(request, await request.json())
        return response

    async def run() -> tuple[int, bytes]:
        app = web.Application()
        app.router.add_post("/{tail:.*}", handle)
        path = f"/v1beta/models/sample:{'streamGenerateContent' if body.get('stream') else 'generateContent'}"
        async with TestServer(app, host="127.0.0.1") as server, ClientSession() as session, \
                session.post(server.make_url(path), json=body) as reply:
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
    upstream = spec.passthrough(registered.default_url, KEY, Patience(NO_RETRIES))
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
    assert pinned["model"] == "pinned"  # the fields' paths are the protocol's own (Gemini: generationConfig.*)
    assert {change.field.rpartition(".")[2] for change in changes} >= {"model", "temperature"}
    assert spec.tool_schemas([]) == ([], ())
    assert spec.error(429, "slow down").status == 429
    # a translation to Chat goes to a registered protocol that answers other protocols
    if spec.chat is not None:
        assert spec.chat.target in PROTOCOLS and load(spec.chat.target).translating is not None
        assert spec.chat.id_prefix and prepare(name, spec.sample_request,
                                                     route=spec.chat.sample_route).body["messages"]
    if spec.translating is not None:
        translating = spec.translating_upstream(next(iter(PROTOCOLS)), registered.default_url, KEY, None,
                                                Patience(NO_RETRIES))
        assert KEY not in repr(translating)
