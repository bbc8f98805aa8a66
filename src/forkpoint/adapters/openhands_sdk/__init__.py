"""OpenHands SDK (V1) adapter: a persisted 1.58.2 conversation (base_state.json + events/) in; the prefix's tool
calls re-run by the SDK's own tools (TerminalTool, FileEditorTool, TaskTrackerTool, think) through forkpoint's
companion runner in the SDK's venv; the rebuilt conversation resumed by the SDK itself (its persistence dir)
behind the Chat Completions bridge. The SDK is never imported into forkpoint's process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.openhands_sdk.parse import AGENT, parse_conversation
from forkpoint.adapters.openhands_sdk.session import bundle, write_bundle
from forkpoint.adapters.openhands_sdk.spec import SPEC, VERSION
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import FreshObservation, NativePrefix, Plan, RunContext, Trajectory

if TYPE_CHECKING:
    from forkpoint.adapters.base import ToolExecutor
    from forkpoint.adapters.openhands_sdk.launch import SdkHooks


class OpenHandsSdkAdapter(AdapterBase):
    spec = SPEC
    parser = staticmethod(parse_conversation)
    unverified_why = "; a persisted SDK conversation names no SDK version"

    def profile_for(self, trajectory: Trajectory) -> str:
        """A conversation names no SDK version: it is rebuilt with the one verified profile (its quality stays
        ``unverified``: version_facts is the base one)."""
        if trajectory.version is None:
            return self.verified_versions[VERSION]
        return super().profile_for(trajectory)

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor:
        from forkpoint.adapters.openhands_sdk.tools import SdkToolExecutor

        check_paths(plan, context.sandbox.cwd if context.sandbox is not None else str(context.workspace))
        return SdkToolExecutor(plan, context, runtime_python(plan.trajectory.version or ""))

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        session_id = plan.trajectory.session_id or "conversation"  # a UUID: the parser checked it
        destination = out_dir / f"{session_id}.json"
        sha256 = write_bundle(bundle(plan, fresh), destination)
        return NativePrefix(destination, self.native_format, plan.trajectory.session_id, sha256)

    def normalise_observation(self, content: object) -> object:
        """Documented volatile part only: the folder of a truncated terminal output's saved file."""
        from forkpoint.adapters.openhands_sdk.format import normalise_saved_output

        return normalise_saved_output(content)

    def hooks(self) -> SdkHooks:
        from forkpoint.adapters.openhands_sdk.launch import SdkHooks

        return SdkHooks()


def runtime_python(version: str) -> Path:
    """The installed SDK's Python (replay needs the SDK's tools, not only continuation)."""
    from forkpoint import runtimes

    runtimes.check_verified(AGENT, version)
    runtime = runtimes.find(AGENT, version)
    if runtime is None:
        raise ReplayError(ErrorKind.CONFIGURATION, f"replaying OpenHands SDK tool calls needs the SDK {version} "
                                                   f"itself: run `forkpoint agents install {AGENT}@{version}`")
    return runtime.entrypoint


def check_paths(plan: Plan, workspace: str) -> None:
    """The SDK's file editor refuses relative paths and its recorded paths are absolute (sent back to the model
    verbatim): the workspace must be the recorded one. ``workspace`` is the workspace as the tools see it."""
    recorded = plan.trajectory.cwd
    real = os.path.realpath(workspace)
    if recorded is None or os.path.realpath(recorded) != real:
        raise ReplayError(ErrorKind.WORKSPACE,
                          f"the OpenHands SDK conversation was recorded in the workspace {recorded}, but the "
                          f"workspace is {workspace}; the SDK records absolute paths (editor calls, the terminal's "
                          f"working directory) that are sent back to the model verbatim, so replay it in a fresh "
                          f"workspace at {recorded}")
    root = os.path.normpath(recorded)
    for call in plan.calls:
        path = call.arguments.get("path")
        if isinstance(path, str) and os.path.isabs(path):
            normal = os.path.normpath(path)
            if normal != root and not normal.startswith(root.rstrip("/") + "/"):
                raise ReplayError(ErrorKind.WORKSPACE, f"call {call.call_id} names {path}, outside the recorded "
                                                       f"workspace {recorded}")
