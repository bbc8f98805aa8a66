"""LoopbackSite: an aiohttp app on 127.0.0.1 only, a free port, one start, an idempotent stop."""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web

from forkpoint.process.loopback import LoopbackSite


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
