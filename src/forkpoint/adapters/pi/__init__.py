"""Pi adapter: Pi 0.83.0 / 1.6.0 event JSONL or v3 session in, rebuilt v3 session + the Pi SDK (Node runner) out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.pi.parse import AGENT, parse_pi
from forkpoint.adapters.pi.spec import FAMILY_SYSTEM, SPEC, VERSION, VERSION_1X
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



def read_version(trajectory: Trajectory) -> str:
    """The verified version an unversioned Pi recording is read as: that of its format family."""
    return VERSION_1X if trajectory.native.family == FAMILY_SYSTEM else VERSION


class PiAdapter(AdapterBase):
    spec = SPEC
    parser = staticmethod(parse_pi)

    def profile_for(self, trajectory: Trajectory) -> str:
        """Pi recordings carry no agent version: the verified profile of their format family. A call it cannot
        re-run is REFUSED per call, so only a boundary whose batches hold one is refused (plan.check_call_policies)."""
        if trajectory.version is None:
            return self.verified_versions[read_version(trajectory)]
        if trajectory.version not in self.verified_versions:
            raise unsupported_version(f"Pi {trajectory.version} is not a verified version (verified: "
                                      f"{', '.join(self.verified_versions)})")
        return self.verified_versions[trajectory.version]

    def format_family(self, trajectory: Trajectory) -> str:
        return str(trajectory.native.family)

    def version_facts(self, trajectory: Trajectory) -> VersionFacts:
        """A Pi session names no agent version: read with the verified profile of its format family (0.83.0 for
        sessions without ``system`` messages, 1.6.0 for those with them; docs/adapters/pi.md)."""
        if trajectory.version is None:
            from forkpoint.adapters.pi.tools import profile_for

            version = read_version(trajectory)
            tools = profile_for(version, (call for batch in trajectory.batches for call in batch.calls))
            return VersionFacts(None, "verified", self.format_family(trajectory), version,
                                self.verified_versions[version], tool_profile=tools.label)
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
        from forkpoint.adapters.pi.tools import PiToolExecutor, profile_for

        tools = plan.trajectory.native.tools if plan is not None else DEFAULT_TOOLS
        version = (plan.trajectory.version or read_version(plan.trajectory)) if plan is not None else VERSION
        calls = (call for batch in plan.trajectory.batches for call in batch.calls) if plan is not None else ()
        return PiToolExecutor(context, installed(version), tools, profile_for(version, calls))

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
        target = resolve_entrypoint(AGENT, trajectory.version or read_version(trajectory), entrypoint)
        from_entrypoint(target.entrypoint, target.version)
        return target

    def hooks(self) -> PiHooks:
        from forkpoint.adapters.pi.launch import PiHooks

        return PiHooks()
