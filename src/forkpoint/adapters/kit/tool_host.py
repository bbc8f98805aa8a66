"""What the tool replays of the npm CLIs that re-run their own tools share (Gemini CLI, Qwen Code, Copilot CLI):
a loopback model endpoint that hands the real CLI the recorded call (``LoopbackToolHost``), and the confinement of
the CLI's run in a sandbox with its own network namespace, where only that endpoint's port is relayed in
(``HostConfinement``). What each CLI's model API looks like stays in the agent's own ``tools.py``."""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar
from urllib.parse import urlsplit

from aiohttp import web

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process.loop_thread import LoopThread
from forkpoint.process.loopback import LoopbackSite

if TYPE_CHECKING:
    from forkpoint.sandbox.base import Sandbox
    from forkpoint.sandbox.forward import HostRelay

#: the CLI's ``-p`` prompt: the host answers it with the recorded call, whatever it says
PROMPT = "forkpoint-tool-replay"
#: how long one replayed call may take, and what the CLI's start-up may add to it
DEFAULT_TIMEOUT_S = 600.0
STARTUP_MARGIN_S = 120.0


class LoopbackToolHost(ABC):
    """The loopback model API the CLI re-runs its tools against, served on its own event-loop thread. The routes
    live under a per-executor secret path segment (like the bridge's token): another local process cannot hand
    the host a tool result, or drive the CLI, without it."""

    label: ClassVar[str]  # the CLI's name in messages ("Gemini CLI")
    thread_name: ClassVar[str]
    routes: ClassVar[tuple[str, ...]]  # the model API's POST paths, under the token
    url_suffix: ClassVar[str] = ""  # appended to the URL the CLI is given (after the token)

    def __init__(self) -> None:
        self._serving: LoopThread[str] = LoopThread(self.thread_name)
        self._site = LoopbackSite()
        self.url: str | None = None
        self.token = secrets.token_urlsafe(18)

    @abstractmethod
    async def _answer(self, request: web.Request) -> web.StreamResponse: ...

    async def _listen(self) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        for route in self.routes:
            app.router.add_post(f"/{self.token}{route}", self._answer)
        return f"{await self._site.start(app)}/{self.token}{self.url_suffix}"

    def start(self) -> str:
        if self.url is None:
            try:
                self.url = self._serving.start(self._listen, self._site.stop, 10.0)
            except Exception as error:
                raise ReplayError(ErrorKind.EXECUTOR, f"the {self.label} tool host did not start: {error}") from error
        return self.url

    def close(self) -> None:
        self._serving.stop(10.0)


class HostConfinement:
    """How the CLI reaches the tool host: the host's network under a sandbox that shares it; in a sandbox with its
    own network namespace only the host's port, relayed in (one relay for every call, closed with the executor)."""

    def __init__(self, sandbox: Sandbox, state_dir: Path) -> None:
        self.sandbox = sandbox
        self.state_dir = state_dir
        self._relay: HostRelay | None = None

    def confine(self, argv: list[str], readable: tuple[Path, ...],
                url: str) -> tuple[list[str], tuple[Path, ...], bool]:
        """The CLI's argv, what it reads and whether it shares the host's network."""
        if not self.sandbox.private_network:
            return argv, readable, True
        if self._relay is None:
            from forkpoint.sandbox.forward import HostRelay

            port = urlsplit(url).port
            assert port is not None
            self._relay = HostRelay(port, self.state_dir)
        return self._relay.wrap(self.sandbox.host_command(argv)), (*readable, *self._relay.readable), False

    def close(self) -> None:
        if self._relay is not None:
            self._relay.close()
