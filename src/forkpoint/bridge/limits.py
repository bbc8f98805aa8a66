"""Resource bounds of the model bridge: connections, in-flight requests, buffered body bytes and slow clients.

Any local process can connect to the bridge's loopback port (only the path token keeps it from the routes). Without
bounds, many concurrent large bodies grow the bridge's memory without limit, and a client that never finishes its
headers (slowloris) holds a connection forever. The bounds shed load — a connection closed, a 503 with
``Retry-After`` — and never put the bridge in the FAILED state: only the gate decides that, so the validated agent
is served again as soon as the flood stops.

- **Connections**: at most ``max_connections`` open at once; one more is closed as soon as it is accepted.
- **Headers**: a request's headers must be complete ``header_timeout_s`` after the connection opened or its first byte
  arrived, else the connection is closed (a raw-socket guard around aiohttp's protocol: aiohttp has no header timeout
  of its own, and its keep-alive timer starts only after a first request). Idle keep-alive connections are closed by
  aiohttp after ``idle_timeout_s``.
- **Requests in flight**: at most ``max_in_flight`` (after the token check); one more gets 503 at once, its body unread.
- **Buffered bytes**: bodies are read against one budget of ``max_buffered_bytes`` for all requests in flight,
  reserved at once from ``Content-Length`` (or chunk by chunk) and released when the request is done; a body that does
  not fit gets 503 without reading further. A body must arrive within ``body_timeout_s`` (else 408).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Limits:
    max_connections: int = 64
    max_in_flight: int = 8
    max_buffered_bytes: int = 64 * 1024 * 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 60.0
    idle_timeout_s: float = 120.0


class Shed(Exception):
    """A request refused for load (503) or slowness (408): the connection is closed, the bridge does not fail."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class ByteBudget:
    """Bytes buffered by all requests in flight (used from the event loop thread only)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.peak = 0

    def reserve(self, size: int) -> bool:
        if self.used + size > self.limit:
            return False
        self.used += size
        self.peak = max(self.peak, self.used)
        return True

    def release(self, size: int) -> None:
        self.used -= size


class Connections:
    """Open connections of one bridge and their guards, keyed by transport."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.guards: dict[asyncio.BaseTransport, GuardedProtocol] = {}
        self.refused = 0
        self.timed_out = 0

    def wrap(self, factory: Callable[[], asyncio.Protocol]) -> Callable[[], asyncio.Protocol]:
        """A protocol factory for ``loop.create_server`` around aiohttp's own (``web.Server``)."""
        return lambda: GuardedProtocol(factory, self)

    def request_started(self, transport: asyncio.BaseTransport | None) -> None:
        guard = self.guards.get(transport) if transport is not None else None
        if guard is not None:
            guard.request_started()

    def request_finished(self, transport: asyncio.BaseTransport | None) -> None:
        guard = self.guards.get(transport) if transport is not None else None
        if guard is not None:
            guard.request_finished()


class GuardedProtocol(asyncio.Protocol):
    """aiohttp's request handler behind a connection cap and a header deadline; everything else is passed on."""

    def __init__(self, factory: Callable[[], asyncio.Protocol], connections: Connections) -> None:
        self._factory = factory
        self._connections = connections
        self._inner: asyncio.Protocol | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._in_request = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        connections = self._connections
        if len(connections.guards) >= connections.limits.max_connections:
            connections.refused += 1
            transport.close()
            return
        self._transport = transport
        connections.guards[transport] = self
        self._inner = self._factory()
        self._inner.connection_made(transport)
        self._arm()  # the first request's headers are due

    def data_received(self, data: bytes) -> None:
        if self._inner is None:
            return
        if not self._in_request and self._timer is None:
            self._arm()  # a new request begins on a kept-alive connection
        self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._inner is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._transport is not None:
            self._connections.guards.pop(self._transport, None)
        if self._inner is not None:
            self._inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._inner is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._inner is not None:
            self._inner.resume_writing()

    def request_started(self) -> None:
        self._in_request = True
        self._disarm()  # the headers are complete: the body has its own deadline

    def request_finished(self) -> None:
        self._in_request = False  # the next request's deadline starts with its first byte

    def _arm(self) -> None:
        self._disarm()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._connections.limits.header_timeout_s, self._headers_overdue)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _headers_overdue(self) -> None:
        self._timer = None
        if not self._in_request and self._transport is not None:
            self._connections.timed_out += 1
            self._transport.close()


def shed_headers() -> dict[str, Any]:
    return {"Retry-After": "1", "Connection": "close"}
