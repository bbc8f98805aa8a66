"""Pi adapter: Pi 0.83.0 event JSONL or v3 session in, rebuilt v3 session + the Pi SDK (Node runner) out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.pi.parse import AGENT, parse_pi
from forkpoint.adapters.pi.spec import SPEC, VERSION
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
    from forkpoint.adapters.pi.launch import PiHooks



class PiAdapter(AdapterBase):
    spec = SPEC
    parser = staticmethod(parse_pi)

    def profile_for(self, trajectory: Trajectory) -> str:
        """Pi recordings carry no agent version: the verified 0.83.0 profile. A call it cannot re-run is REFUSED
        per call, so only a boundary whose batches hold one is refused (plan.check_call_policies)."""
        if trajectory.version not in (None, VERSION):
            raise unsupported_version(f"Pi {trajectory.version} is not a verified version (verified: {VERSION})")
        return self.verified_versions[VERSION]

    def version_facts(self, trajectory: Trajectory) -> VersionFacts:
        """A Pi session names no agent version: read with the verified profile, as before (docs/adapters/pi.md)."""
        if trajectory.version is None:
            return VersionFacts(None, "verified", self.spec.formats[0].name, VERSION, self.verified_versions[VERSION])
        return super().version_facts(trajectory)

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        from forkpoint.adapters.pi.session import session_file_name, write_session

        destination = out_dir / session_file_name(plan.trajectory.native, plan.trajectory.session_id or "")
        return NativePrefix(destination, self.native_format, plan.trajectory.session_id,
                            write_session(plan, fresh, destination))

    # -- replay -------------------------------------------------------------------------------------------------

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor:
        from forkpoint.adapters.pi.parse import DEFAULT_TOOLS
        from forkpoint.adapters.pi.runtime import installed
        from forkpoint.adapters.pi.tools import PiToolExecutor

        tools = plan.trajectory.native.tools if plan is not None else DEFAULT_TOOLS
        return PiToolExecutor(context, installed(), tools)

    def normalise_observation(self, content: object) -> object:
        """Documented volatile part only: the random name of bash's full-output temp file."""
        from forkpoint.adapters.pi.tools import normalize_volatile

        return normalize_volatile(content)

    # -- continuation ---------------------------------------------------------------------------------------------

    def prepare_launch(self, trajectory: Trajectory, entrypoint: Path | None) -> LaunchTarget:
        from forkpoint.adapters.pi.launch import recorded_model
        from forkpoint.adapters.pi.runtime import from_entrypoint
        from forkpoint.runtimes import resolve_entrypoint

        recorded_model(trajectory.native)  # refuses an API the resume profile was not verified with
        target = resolve_entrypoint(AGENT, trajectory.version or VERSION, entrypoint)
        from_entrypoint(target.entrypoint)
        return target

    def hooks(self) -> PiHooks:
        from forkpoint.adapters.pi.launch import PiHooks

        return PiHooks()
