"""The shared skeleton of the per-agent ``--sandbox bwrap`` end-to-end tests (``tests/e2e/test_*_sandbox.py``).

Each of those tests replays (and continues) a real recording with the workspace at another host path than the
recorded cwd, and runs the held-out checks (``forkpoint.testing.held_out``) as a replayed call: one recorded
command swapped for ``sh probe.sh``. ``SandboxCase`` holds what differs per agent (fixture, trajectory file, the
recorded command as the file spells it); the tests keep what is really theirs (the scripted continuation, the
agent-specific assertions).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from forkpoint.core.results import ReplayResult
from forkpoint.testing.held_out import PROBE_FILE, HeldOut


@dataclass(frozen=True)
class SandboxCase:
    """One agent's recording for the bwrap e2e tests. ``recorded_command`` is replaced by ``probe_command`` in the
    trajectory's text (both as the file spells them, JSON escapes included)."""

    agent: str
    fixture: Path
    trajectory: str
    recorded_command: str
    probe_command: str

    @property
    def source(self) -> Path:
        return self.fixture / self.trajectory

    def workspace_elsewhere(self, tmp_path: Path) -> Path:
        """The fixture's initial workspace at a host path that is not the recorded cwd."""
        workspace = tmp_path / "not-the-recorded-path" / "ws"
        shutil.copytree(self.fixture / "workspace-initial", workspace)
        return workspace

    def run(self, tmp_path: Path, workspace: Path, trajectory: Path | None = None,
            **overrides: Any) -> ReplayResult:
        """``forkpoint replay`` / ``continue`` of the recording (or ``trajectory``) under ``--sandbox bwrap``."""
        from forkpoint.run.engine import execute
        from forkpoint.run.request import build_request

        values: dict[str, Any] = {"agent": self.agent, "trajectory": str(trajectory or self.source),
                                  "workspace": str(workspace), "state_dir": str(tmp_path / "state"),
                                  "output_dir": str(tmp_path / "out"), "run_id": "run", "sandbox": "bwrap",
                                  "after_step": 1, **overrides}
        return execute(build_request(values, source="test"))

    def probing_recording(self, tmp_path: Path, workspace: Path, bait: HeldOut) -> Path:
        """The recording with its command swapped for ``sh probe.sh`` (the held-out script, in the workspace)."""
        (workspace / PROBE_FILE).write_text(bait.script(workspace))
        text = self.source.read_text()
        if self.recorded_command not in text:
            raise AssertionError(f"{self.recorded_command!r} is not in {self.source}")
        trajectory = tmp_path / f"probing-{self.trajectory}"
        trajectory.write_text(text.replace(self.recorded_command, self.probe_command))
        return trajectory

    def replay_probe(self, tmp_path: Path, bait: HeldOut, **overrides: Any) -> str:
        """Replay-only of the probing recording; the fresh observations' previews as one text (failure raised)."""
        workspace = self.workspace_elsewhere(tmp_path)
        result = self.run(tmp_path, workspace, self.probing_recording(tmp_path, workspace, bait), replay_only=True,
                          **overrides)
        if result.failure is not None:
            raise AssertionError(result.failure)
        rows = json.loads((Path(result.output_dir or "") / "observations.json").read_text())["observations"]
        return json.dumps([row["fresh_preview"] for row in rows])


def assert_contained(bait: HeldOut, seen: str) -> None:
    """The probe ran (each attempt printed its refusal) and nothing got out, judged on the host. (Writing "HOME" may
    succeed inside: the sandbox's HOME is the run's own; the host file is what ``violations`` checks.)"""
    for outcome in ("probed", "outside-refused", "host-path-refused", "canary-hidden", "loopback-unreachable"):
        assert outcome in seen, (outcome, seen[-3000:])
    assert bait.address is None or "address-unreachable" in seen, seen[-3000:]
    assert bait.violations(seen) == []
