"""The committed recordings of every adapter (tests/fixtures/<folder>/<version>/<scenario>/) and their workspaces.

One table says, per adapter, where its recordings live, which file is the trajectory forkpoint reads, whether its
recordings are real (written by the agent's own binaries) or constructed, and whether re-running its tools needs
the agent's installed runtime (the agent's own tool code runs them). A missing adapter, fixture folder or runtime
is reported as "not available" by the scripts, never a crash.
"""

from __future__ import annotations

import json
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import FIXTURES

from forkpoint.core.model import CallPolicy, Trajectory
from forkpoint.testing import recordings


@dataclass(frozen=True)
class Spec:
    folder: str  # tests/fixtures/<folder>
    trajectory: str  # glob of the trajectory file inside a scenario directory (the first match is used)
    needs_runtime: bool  # the agent's own installed code re-runs its tools
    constructed: bool = False  # hand-made recordings (the agent could not be installed to record them)


SPECS: dict[str, Spec] = {
    "claude-code": Spec("claude_code", "session.jsonl", False),
    "codex": Spec("codex", "rollout.jsonl", False),
    "pi": Spec("pi", "events.jsonl", True),
    "opencode": Spec("opencode", "export.json", True),
    "mini-swe-agent": Spec("mini_swe_agent", "trajectory.traj.json", True),
    "openhands": Spec("openhands", "trajectory.json", True),
    "swe-agent": Spec("swe_agent", "*.traj", False, constructed=True),
    "gemini-cli": Spec("gemini_cli", "session.jsonl", True),
    "copilot-cli": Spec("copilot_cli", "session.jsonl", True),
    "qwen-code": Spec("qwen_code", "session.jsonl", True),
    "openhands-sdk": Spec("openhands-sdk", "conversation/base_state.json", True),
}
ADAPTERS = tuple(SPECS)


@dataclass(frozen=True)
class Fixture:
    adapter: str
    version: str
    scenario: str
    path: Path
    trajectory: Path

    @property
    def meta(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.path / "meta.json").read_text("utf-8"))
        return data

    @property
    def name(self) -> str:
        return f"{self.adapter} {self.version} {self.scenario}"


def fixtures(adapters: tuple[str, ...] = ADAPTERS) -> list[Fixture]:
    """Every scenario directory with a trajectory and a meta.json (+ workspace-initial/ unless empty), sorted."""
    found = []
    for adapter in adapters:
        spec = SPECS[adapter]
        for scenario in sorted((FIXTURES / spec.folder).glob("*/*/")):
            trajectories = sorted(scenario.glob(spec.trajectory))
            # git keeps no empty directory: a missing workspace-initial/ is an empty initial workspace
            if trajectories and (scenario / "meta.json").is_file():
                found.append(Fixture(adapter, scenario.parent.name, scenario.name, scenario, trajectories[0]))
    return found


def versions(adapter: str) -> list[str]:
    """The version folders of an adapter's fixtures (empty when it has none)."""
    root = FIXTURES / SPECS[adapter].folder
    return sorted(p.name for p in root.iterdir() if p.is_dir() and p.name[:1].isdigit()) if root.is_dir() else []


def replayable_boundary(parsed: Trajectory) -> tuple[int, str]:
    """The last boundary replay-only may run to (no refused call in its prefix, no refused boundary), and why the
    rest is not replayed ("" when every complete batch is)."""
    refused_at = next((index for index, batch in enumerate(parsed.batches[: parsed.complete_count])
                       if any(call.policy is CallPolicy.REFUSED for call in batch.calls)), parsed.complete_count)
    after = refused_at
    while after > 0 and after in parsed.boundary_refusals:
        after -= 1
    if after == parsed.complete_count:
        return after, ""
    if refused_at < parsed.complete_count:
        call = next(call for call in parsed.batches[refused_at].calls if call.policy is CallPolicy.REFUSED)
        return after, f"batch {refused_at + 1} `{call.name}` refused: {call.policy_reason or 'by policy'}"
    return after, f"boundary {parsed.complete_count} refused: {parsed.boundary_refusals[parsed.complete_count]}"


def restored_workspace(fixture: Fixture) -> AbstractContextManager[Path]:
    """The recording's initial workspace at the recorded cwd (tool inputs name it), removed afterwards; holds the
    same per-cwd lock as the adapters' tests, so a concurrent test of one recorded path waits."""
    return recordings.restored_workspace(fixture.path)
