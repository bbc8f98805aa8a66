"""OpenHands adapter: a 0.62.0 V0 event trajectory in; the prefix replayed by OpenHands itself (ReplayManager on
the CLI runtime, through forkpoint's companion runner in the OpenHands venv); the real agent continued live behind
the Chat Completions bridge. OpenHands is never imported into forkpoint's process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.openhands.parse import AGENT, parse_events
from forkpoint.adapters.openhands.session import prefix_events, write_events
from forkpoint.adapters.openhands.spec import SPEC
from forkpoint.core.errors import ErrorKind, ReplayError
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
    from forkpoint import runtimes

    runtimes.check_verified(AGENT, version)
    runtime = runtimes.find(AGENT, version)
    if runtime is None:
        raise ReplayError(ErrorKind.CONFIGURATION, f"replaying OpenHands actions needs OpenHands {version} itself: "
                                                   f"run `forkpoint agents install openhands@{version}`")
    return runtime.entrypoint


def check_paths(plan: Plan, workspace: str) -> None:
    """OpenHands' editor refuses paths outside its workspace, and its recorded paths are absolute: the workspace
    must be the recorded one (no path rewriting: the tool calls are sent back to the model verbatim). ``workspace``
    is the workspace as the tools see it (under bwrap: mounted at the recorded cwd)."""
    recorded = plan.trajectory.cwd
    real = os.path.realpath(workspace)
    if recorded is None or os.path.realpath(recorded) != real:
        raise ReplayError(ErrorKind.WORKSPACE,
                          f"the OpenHands trajectory was recorded in the workspace {recorded}, but the workspace is "
                          f"{workspace}; OpenHands records absolute paths (editor calls, command cwd) that are sent "
                          f"back to the model verbatim, so replay it in a fresh workspace at {recorded}")
    root = os.path.normpath(recorded)
    for call in plan.calls:
        path = call.arguments.get("path")
        if isinstance(path, str) and os.path.isabs(path):
            normal = os.path.normpath(path)
            if normal != root and not normal.startswith(root.rstrip("/") + "/"):
                raise ReplayError(ErrorKind.WORKSPACE, f"call {call.call_id} names {path}, outside the recorded "
                                                       f"workspace {recorded}; OpenHands would refuse it")
