"""OpenCode's step and idle watchdogs (a ``forkpoint.process.Watch``; pure apart from the clock it is given and
the stdout file it reads).

OpenCode's own step limit (``agent.build.steps``) is soft: it injects a "MAXIMUM STEPS REACHED" message, still
executes tool calls, and restarts its count on every ``run``. So forkpoint counts completed steps itself, from
the stdout ``step_finish`` events: the stderr ``message=loop ... step=N`` line is logged BEFORE that step's
stdout events, so a signal sent on it loses them. When ``budget`` steps have finished and the last one asked
for more (``reason`` is not ``stop``), the run gets SIGINT (OpenCode dies of it at once, writing nothing more);
if it is still there after ``interrupt_grace_s`` it is terminated. With no output on either stream for
``idle_s`` the run is terminated (a silent model). The stdout is a file, not a pipe (1.17.11 exits without
flushing a pipe: a final event over 64 KiB was cut), which the watch reads on every tick (``poll``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass, field

from forkpoint.process import WATCH_TERMINATE

DEFAULT_IDLE_S = 600.0


@dataclass
class StepWatch:
    budget: int | None
    idle_s: float = DEFAULT_IDLE_S
    interrupt_grace_s: float = 10.0
    steps: int = 0
    finished: bool = False  # the last step ended with reason "stop": OpenCode exits on its own
    interrupted_at: float | None = None
    idle_fired: bool = False
    last_output: float = field(default_factory=time.monotonic)
    stdout_fd: int | None = None  # the agent's stdout file, read from where the last poll stopped
    _buffer: bytes = b""

    def poll(self) -> None:
        """Feed what the agent appended to its stdout file since the last call."""
        if self.stdout_fd is None:
            return
        while chunk := os.read(self.stdout_fd, 1024 * 1024):
            self.output("stdout", chunk)

    def output(self, stream: str, chunk: bytes) -> None:
        self.last_output = time.monotonic()
        if stream != "stdout":
            return
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for raw in lines:
            self.line(raw)

    def line(self, raw: bytes) -> None:
        try:
            event = json.loads(raw)
        except ValueError:
            return
        if isinstance(event, dict) and event.get("type") == "step_finish":
            self.steps += 1
            part = event.get("part")
            self.finished = isinstance(part, dict) and part.get("reason") == "stop"

    @property
    def budget_fired(self) -> bool:
        return self.interrupted_at is not None

    def action(self, now: float) -> int | None:
        self.poll()
        if self.interrupted_at is not None:
            return WATCH_TERMINATE if now - self.interrupted_at > self.interrupt_grace_s else None
        if self.budget is not None and self.steps >= self.budget and not self.finished:
            self.interrupted_at = now
            return signal.SIGINT
        if now - self.last_output > self.idle_s:
            self.idle_fired = True
            return WATCH_TERMINATE
        return None
