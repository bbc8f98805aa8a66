"""Gemini CLI adapter: a 0.61.0 chat-recording JSONL in, a rebuilt session + the real ``gemini --session-file`` out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.gemini_cli.parse import parse_gemini
from forkpoint.adapters.gemini_cli.spec import SPEC, VERSION
from forkpoint.core.errors import unsupported_version
from forkpoint.core.model import (
    FreshObservation,
    LaunchTarget,
    NativePrefix,
    Plan,
    RunContext,
    Trajectory,
    VersionFacts,
)

if TYPE_CHECKING:
    from forkpoint.adapters.base import ToolExecutor
    from forkpoint.adapters.gemini_cli.launch import GeminiHooks


class GeminiCliAdapter(AdapterBase):
    spec = SPEC
    parser = staticmethod(parse_gemini)

    def profile_for(self, trajectory: Trajectory) -> str:
        """Gemini CLI sessions name no CLI version: the verified 0.61.0 profile."""
        if trajectory.version not in (None, VERSION):
            raise unsupported_version(f"Gemini CLI {trajectory.version} is not a verified version "
                                      f"(verified: {VERSION})")
        return self.verified_versions[VERSION]

    def version_facts(self, trajectory: Trajectory) -> VersionFacts:
        if trajectory.version is None:
            return VersionFacts(None, "verified", self.spec.formats[0].name, VERSION, self.verified_versions[VERSION])
        return super().version_facts(trajectory)

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        from forkpoint.adapters.gemini_cli.session import session_file_name, write_session

        destination = out_dir / session_file_name(plan.trajectory.native)
        return NativePrefix(destination, self.native_format, plan.trajectory.session_id,
                            write_session(plan, fresh, destination))

    # -- replay -------------------------------------------------------------------------------------------------

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor:
        from forkpoint.adapters.gemini_cli.tools import GeminiToolExecutor

        return GeminiToolExecutor(context)

    def normalise_observation(self, content: object) -> object:
        """Documented volatile part only: the process group id run_shell_command reports."""
        from forkpoint.adapters.gemini_cli.tools import normalize_volatile

        return normalize_volatile(content)

    # -- continuation ---------------------------------------------------------------------------------------------

    def prepare_launch(self, trajectory: Trajectory, entrypoint: Path | None) -> LaunchTarget:
        from forkpoint.adapters.gemini_cli.launch import recorded_model
        from forkpoint.runtimes import resolve_entrypoint

        recorded_model(trajectory.native)
        return resolve_entrypoint(SPEC.name, trajectory.version or VERSION, entrypoint)

    def hooks(self) -> GeminiHooks:
        from forkpoint.adapters.gemini_cli.launch import GeminiHooks

        return GeminiHooks()
