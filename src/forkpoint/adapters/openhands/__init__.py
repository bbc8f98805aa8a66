"""OpenHands adapter: a 0.62.0 V0 event trajectory in; the prefix replayed by OpenHands itself (ReplayManager on
the CLI runtime, through forkpoint's companion runner in the OpenHands venv); the real agent continued live behind
the Chat Completions bridge. OpenHands is never imported into forkpoint's process.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.kit.python_runner import check_recorded_workspace
from forkpoint.adapters.kit.python_runner import runtime_python as kit_runtime_python
from forkpoint.adapters.openhands.parse import AGENT, parse_events
from forkpoint.adapters.openhands.session import prefix_events, write_events
from forkpoint.adapters.openhands.spec import SPEC
from forkpoint.core.model import FreshObservation, NativePrefix, Plan, RunContext

if TYPE_CHECKING:
    from forkpoint.adapters.base import ToolExecutor
    from forkpoint.adapters.openhands.launch import OpenHandsHooks



class OpenHandsAdapter(AdapterBase):
    spec = SPEC
    parser = staticmethod(parse_events)
    unverified_why = "; 0.62.0 is the last release with the V0 controller's ReplayManager"

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor:
        from forkpoint.adapters.openhands.tools import OpenHandsToolExecutor

        check_paths(plan, context.sandbox.cwd if context.sandbox is not None else str(context.workspace))
        return OpenHandsToolExecutor(plan, context, runtime_python(plan.trajectory.version or ""))

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        destination = out_dir / f"{plan.trajectory.source_path.stem}.json"
        sha256 = write_events(prefix_events(plan, fresh), destination)
        return NativePrefix(destination, self.native_format, plan.trajectory.session_id, sha256)

    def hooks(self) -> OpenHandsHooks:
        from forkpoint.adapters.openhands.launch import OpenHandsHooks

        return OpenHandsHooks()


def runtime_python(version: str) -> Path:
    """The installed OpenHands runtime's Python (replay needs OpenHands itself, not only continuation)."""
    return kit_runtime_python(AGENT, version, "replaying OpenHands actions needs OpenHands")


def check_paths(plan: Plan, workspace: str) -> None:
    """OpenHands' editor refuses paths outside its workspace, and its recorded paths are absolute: the workspace
    must be the recorded one."""
    check_recorded_workspace(plan, workspace, what="the OpenHands trajectory",
                             why="OpenHands records absolute paths (editor calls, command cwd)",
                             refusal="; OpenHands would refuse it")
