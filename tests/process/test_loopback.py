"""LoopbackSite: an aiohttp app on 127.0.0.1 only, a free port, one start, an idempotent stop."""

from __future__ import annotations

import asyncio
import socket
import time
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web

from forkpoint.process.loopback import SHUTDOWN_GRACE_S, LoopbackSite


async def _hello(_: web.Request) -> web.Response:
    return web.Response(text="hello")


def test_a_site_serves_on_loopback_refuses_a_second_start_and_closes_its_port() -> None:
    async def scenario() -> tuple[str, str]:
        app = web.Application()
        app.router.add_get("/hello", _hello)
        site = LoopbackSite()
        url = await site.start(app)
        try:
            with pytest.raises(RuntimeError, match="already serving"):
                await site.start(web.Application())
            async with aiohttp.ClientSession() as session, session.get(f"{url}/hello") as response:
                body = await response.text()
        finally:
            await site.stop()
            await site.stop()  # idempotent
        return url, body

    url, body = asyncio.run(scenario())
    parts = urlsplit(url)
    assert parts.hostname == "127.0.0.1" and parts.port and body == "hello"
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", parts.port), timeout=5).close()


def test_stop_with_a_stalled_stream_in_flight_ends_after_the_short_grace() -> None:
    """A handler that sent its headers and then nothing (ScriptedModel's "stall", a silent upstream): ``stop``
    cancels it after SHUTDOWN_GRACE_S instead of aiohttp's 60 s (every test with a stall paid 10 s in
    ``LoopThread.stop`` and left the loop's thread running behind it)."""
    started = asyncio.Event()

    async def stalled(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        started.set()
        await asyncio.sleep(3600)
        return response

    async def scenario() -> float:
        app = web.Application()
        app.router.add_get("/stall", stalled)
        site = LoopbackSite()
        url = await site.start(app)
        async with aiohttp.ClientSession() as session, session.get(f"{url}/stall") as response:
            assert response.status == 200
            await asyncio.wait_for(started.wait(), 10)
            begun = time.monotonic()
            await asyncio.wait_for(site.stop(), 20)
            return time.monotonic() - begun

    assert asyncio.run(scenario()) < 2 * SHUTDOWN_GRACE_S + 3  # a grace to end, then one to finish cancelled
