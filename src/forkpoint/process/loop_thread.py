"""An asyncio event loop on a daemon thread: how the model bridge, OpenCode's tool host and ScriptedModel serve HTTP
while the caller's thread supervises processes. One lifecycle for the three: ``start`` returns once the server
listens (or raises what stopped it), ``stop`` is idempotent and bounded, and the teardown always runs on the loop
that did the set-up, after a failed set-up too (an upstream session opened before the failure is closed)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class LoopThread(Generic[T]):
    """One event loop, one daemon thread, one start and one stop."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop_requested = False

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The running loop (for ``call_soon_threadsafe``), None before ``start``."""
        return self._loop

    @property
    def running(self) -> bool:
        """The loop serves (started, not yet stopped)."""
        return self._loop is not None and self._loop.is_running()

    @property
    def alive(self) -> bool:
        """The thread has not ended (it may be tearing down)."""
        return self._thread is not None and self._thread.is_alive()

    def start(self, setup: Callable[[], Awaitable[T]], teardown: Callable[[], Awaitable[None]],
              timeout_s: float | None = None) -> T:
        """Run ``setup`` on a new loop in a new thread; its value once it returned. The loop then serves until
        ``stop`` and runs ``teardown``. Raises what ``setup`` raised (the thread is joined first), or
        ``TimeoutError`` when it did not finish within ``timeout_s`` (``stop`` still ends the thread)."""
        if self._thread is not None:
            raise RuntimeError(f"{self.name} was already started")
        loop = asyncio.new_event_loop()
        ready = threading.Event()
        outcome: dict[str, Any] = {}

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                outcome["value"] = loop.run_until_complete(setup())
            except BaseException as error:  # handed to start() below
                outcome["error"] = error
            ready.set()
            if "value" in outcome:
                loop.run_forever()
            try:
                loop.run_until_complete(teardown())
                _finish_remaining_tasks(loop)
            finally:
                loop.close()

        self._loop = loop
        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        if not ready.wait(timeout_s):
            raise TimeoutError(f"{self.name} did not start within {timeout_s:.0f} s")
        if "error" in outcome:
            self._thread.join()
            raise outcome["error"]
        value: T = outcome["value"]
        return value

    def stop(self, timeout_s: float) -> bool:
        """Stop the loop (the teardown runs) and wait for the thread; True when it ended. A second call only waits:
        it never interrupts the first call's teardown."""
        thread, loop = self._thread, self._loop
        if thread is None or loop is None:
            return True
        if thread.is_alive() and not self._stop_requested:
            self._stop_requested = True
            with contextlib.suppress(RuntimeError):  # closed: the set-up failed, the thread is ending on its own
                loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)
        return not thread.is_alive()


#: how long tasks the teardown left behind (e.g. a handler of a connection the server just cut) get to finish
#: after they are cancelled
CANCEL_GRACE_S = 5.0


def _finish_remaining_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel what is still pending and let it run to its end, as ``asyncio.run`` does: a task left pending on a
    closed loop is destroyed unfinished ("Task was destroyed but it is pending!"), its ``finally`` never run."""
    tasks = asyncio.all_tasks(loop)
    for task in tasks:
        task.cancel()
    if tasks:
        loop.run_until_complete(asyncio.wait(tasks, timeout=CANCEL_GRACE_S))
    loop.run_until_complete(loop.shutdown_asyncgens())
