"""OpenHands SDK (V1) adapter: a persisted 1.58.2 conversation (base_state.json + events/) in; the prefix's tool
calls re-run by the SDK's own tools (TerminalTool, FileEditorTool, TaskTrackerTool, think) through forkpoint's
companion runner in the SDK's venv; the rebuilt conversation resumed by the SDK itself (its persistence dir)
behind the Chat Completions bridge. The SDK is never imported into forkpoint's process.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.kit.python_runner import check_recorded_workspace
from forkpoint.adapters.kit.python_runner import runtime_python as kit_runtime_python
from forkpoint.adapters.openhands_sdk.parse import AGENT, parse_conversation
from forkpoint.adapters.openhands_sdk.session import bundle, write_bundle
from forkpoint.adapters.openhands_sdk.spec import SPEC, VERSION
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
    return kit_runtime_python(AGENT, version, "replaying OpenHands SDK tool calls needs the SDK")


def check_paths(plan: Plan, workspace: str) -> None:
    """The SDK's file editor refuses relative paths and its recorded paths are absolute: the workspace must be
    the recorded one."""
    check_recorded_workspace(plan, workspace, what="the OpenHands SDK conversation",
                             why="the SDK records absolute paths (editor calls, the terminal's working directory)")
