"""The Claude tool executor of a test: ``make(version)`` gives ``run(tool, **arguments)`` in a fresh workspace."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor
from forkpoint.core.model import FreshObservation, RunContext, ToolCall

Run = Callable[..., FreshObservation]


@pytest.fixture
def session_id() -> str:
    return "11111111-2222-3333-4444-555555555555"


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


@pytest.fixture
def make(tmp_path: Path, workspace: Path, session_id: str) -> Iterator[Callable[[str], Run]]:
    executors: list[ClaudeToolExecutor] = []

    def factory(version: str) -> Run:
        context = RunContext(workspace, tmp_path / "state", tmp_path / "out")
        executor = ClaudeToolExecutor(context, version, session_id, tmp_path / "home" / ".claude")
        executors.append(executor)
        counter = iter(range(1_000_000))

        def run(name: str, **arguments: Any) -> FreshObservation:
            return executor.run(ToolCall(f"toolu_{next(counter)}", name, arguments, None))

        return run

    yield factory
    for executor in executors:
        executor.close()
