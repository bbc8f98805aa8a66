"""The committed real recordings (tests/fixtures/<adapter>/<version>/<scenario>/) and their workspaces."""

from __future__ import annotations

import fcntl
import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import FIXTURES

TRAJECTORY = {"claude-code": "session.jsonl", "codex": "rollout.jsonl"}
FOLDER = {"claude-code": "claude_code", "codex": "codex"}


@dataclass(frozen=True)
class Fixture:
    adapter: str
    version: str
    scenario: str
    path: Path

    @property
    def trajectory(self) -> Path:
        return self.path / TRAJECTORY[self.adapter]

    @property
    def meta(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.path / "meta.json").read_text("utf-8"))
        return data

    @property
    def name(self) -> str:
        return f"{self.adapter} {self.version} {self.scenario}"


def fixtures(adapters: tuple[str, ...] = ("claude-code", "codex")) -> list[Fixture]:
    found = []
    for adapter in adapters:
        for trajectory in sorted((FIXTURES / FOLDER[adapter]).glob(f"*/*/{TRAJECTORY[adapter]}")):
            if (trajectory.parent / "workspace-initial").is_dir():
                found.append(Fixture(adapter, trajectory.parent.parent.name, trajectory.parent.name, trajectory.parent))
    return found


@contextmanager
def restored_workspace(fixture: Fixture) -> Iterator[Path]:
    """The recording's initial workspace at the recorded cwd (tool inputs name it), removed afterwards.

    The same lock file as tests/adapters/claude_code/test_fixture_fidelity.py serialises users of one path.
    """
    cwd = Path(fixture.meta["cwd"])
    cwd.parent.mkdir(parents=True, exist_ok=True)
    with (cwd.parent / f".{cwd.name}.fidelity.lock").open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            shutil.rmtree(cwd, ignore_errors=True)
            shutil.copytree(fixture.path / "workspace-initial", cwd, symlinks=True)
            yield cwd
        finally:
            shutil.rmtree(cwd, ignore_errors=True)
            fcntl.flock(handle, fcntl.LOCK_UN)
