"""LoopThread: the one lifecycle of the bridge's, the OpenCode tool host's and ScriptedModel's background loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from forkpoint.process.loop_thread import LoopThread


class Recorder:
    def __init__(self, fail: BaseException | None = None, setup_delay_s: float = 0.0) -> None:
        self.fail = fail
        self.setup_delay_s = setup_delay_s
        self.events: list[str] = []
        self.threads: set[str] = set()

    async def setup(self) -> str:
        self.threads.add(threading.current_thread().name)
        await asyncio.sleep(self.setup_delay_s)
        self.events.append("setup")
        if self.fail is not None:
            raise self.fail
        return "listening"

    async def teardown(self) -> None:
        self.threads.add(threading.current_thread().name)
        self.events.append("teardown")


def test_start_returns_the_setups_value_and_stop_runs_the_teardown_on_the_loop_thread_once() -> None:
    recorder = Recorder()
    serving: LoopThread[str] = LoopThread("loop-under-test")
    assert serving.start(recorder.setup, recorder.teardown, 10) == "listening"
    assert serving.running and serving.alive and recorder.events == ["setup"]
    seen: list[str] = []
    assert serving.loop is not None
    serving.loop.call_soon_threadsafe(lambda: seen.append(threading.current_thread().name))
    assert serving.stop(10) and not serving.alive
    assert serving.stop(10)  # idempotent
    assert recorder.events == ["setup", "teardown"] and recorder.threads == {"loop-under-test"} == set(seen)


def test_a_failed_setup_is_raised_to_the_caller_and_its_teardown_still_runs() -> None:
    recorder = Recorder(fail=OSError("address in use"))
    serving: LoopThread[str] = LoopThread("loop-under-test")
    with pytest.raises(OSError, match="address in use"):
        serving.start(recorder.setup, recorder.teardown, 10)
    assert recorder.events == ["setup", "teardown"] and not serving.alive
    assert serving.stop(1)  # nothing left to stop; a closed loop is not an error


def test_a_setup_slower_than_the_timeout_raises_and_stop_interrupts_it_and_still_tears_down() -> None:
    recorder = Recorder(setup_delay_s=5)
    serving: LoopThread[str] = LoopThread("loop-under-test")
    with pytest.raises(TimeoutError, match="did not start within"):
        serving.start(recorder.setup, recorder.teardown, 0.05)
    assert serving.stop(10) and not serving.alive
    assert recorder.events == ["teardown"]  # the set-up never finished: stop did not wait for it


def test_stop_before_start_does_nothing_and_a_second_start_is_refused() -> None:
    recorder = Recorder()
    serving: LoopThread[str] = LoopThread("loop-under-test")
    assert serving.stop(1) and serving.loop is None and not serving.running
    serving.start(recorder.setup, recorder.teardown, 10)
    try:
        with pytest.raises(RuntimeError, match="already started"):
            serving.start(recorder.setup, recorder.teardown, 10)
    finally:
        serving.stop(10)
    assert recorder.events == ["setup", "teardown"]


def test_tasks_the_teardown_leaves_pending_are_cancelled_and_run_their_finally() -> None:
    """Without this a handler of a connection cut at shutdown was destroyed unfinished when the loop closed."""
    ended: list[str] = []
    stray: list[asyncio.Task[None]] = []

    async def hold() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            ended.append("finally")

    async def setup() -> None:
        stray.append(asyncio.get_running_loop().create_task(hold()))

    async def teardown() -> None:
        pass

    serving: LoopThread[None] = LoopThread("loop-under-test")
    serving.start(setup, teardown, 10)
    assert serving.stop(10)
    assert ended == ["finally"] and stray[0].cancelled()
