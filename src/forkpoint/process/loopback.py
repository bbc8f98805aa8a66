"""An aiohttp application served on 127.0.0.1 only: OpenCode's tool host and ScriptedModel (the bridge has its own
guarded listener, ``bridge.limits``)."""

from __future__ import annotations

from aiohttp import web

#: what an in-flight handler (a stream the client stopped reading, a stalled answer) gets at ``stop`` before it is
#: cancelled: aiohttp's default is 60 s, so every stop with a stalled stream took a minute (the bridge's own
#: listener has one too, ``bridge.server.SHUTDOWN_GRACE_S``)
SHUTDOWN_GRACE_S = 1.0


class LoopbackSite:
    """``start`` an app on 127.0.0.1 (port 0: a free one) and get its base URL; ``stop`` closes it (idempotent)."""

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None

    async def start(self, app: web.Application, port: int = 0) -> str:
        if self._runner is not None:
            raise RuntimeError("the site is already serving")
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=SHUTDOWN_GRACE_S)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", port).start()
        return f"http://127.0.0.1:{self._runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
