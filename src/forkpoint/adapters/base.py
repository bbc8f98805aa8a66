"""The one protocol every agent adapter implements; the engine knows nothing else about agents."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from forkpoint.adapters.spec import AgentSpec
from forkpoint.core.errors import ErrorKind, ReplayError, configuration, unsupported_version
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES
from forkpoint.core.model import (
    Continuation,
    ContinueSettings,
    FreshObservation,
    LaunchTarget,
    NativePrefix,
    Plan,
    RunContext,
    ToolCall,
    Trajectory,
    VersionFacts,
)

if TYPE_CHECKING:
    from forkpoint.adapters.kit.continuation import AgentHooks


class ToolExecutor(Protocol):
    """Re-runs historical calls with the agent's own semantics and output text."""

    def run(self, call: ToolCall) -> FreshObservation:
        """Execute one FRESH-policy call in the workspace; raise ReplayError only when the run must stop."""
        ...

    def close(self) -> None:
        """Release shells and other per-run resources."""
        ...


class Adapter(Protocol):
    """What the engine calls; which parts it may call is declared by the agent's spec (``replays``,
    ``continues``), never probed. Optional hooks have defaults in ``AdapterBase``."""

    @property
    def name(self) -> str: ...

    @property
    def verified_versions(self) -> Mapping[str, str]:
        """Verified agent version -> profile id (the spec's ``versions``)."""
        ...

    @property
    def native_format(self) -> str:
        """Format string of the native prefix file written by ``write_prepared_prefix``."""
        ...

    def parse(self, path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory:
        """Parse a native trajectory of at most ``max_bytes``. Pure apart from reading ``path``; raises ReplayError
        only (a trajectory error for an id that cannot become a file name or argument, see adapters.kit.ids)."""
        ...

    def parse_completed(self, path: Path, companion: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory:
        """Parse a trajectory completed by a companion file (``ReplayRequest.companion_file``)."""
        ...

    def profile_for(self, trajectory: Trajectory) -> str:
        """The verified profile matching the recording's version, or raise unsupported_version (the exact-pin
        rule ``--require-verified-version`` restores)."""
        ...

    def version_facts(self, trajectory: Trajectory) -> VersionFacts:
        """Which format family it was read as, whose tool semantics re-run it and whether its version is verified
        (forkpoint.adapters.versions); raises only for a recording forkpoint cannot replay at all."""
        ...

    def write_prepared_prefix(self, plan: Plan, out_dir: Path) -> NativePrefix:
        """Write the native session cut after batch N with the HISTORICAL observations."""
        ...

    # -- replay (spec.replays) --------------------------------------------------------------------------------------

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor: ...

    def normalise_observation(self, content: object) -> object:
        """The observation with the agent's documented volatile parts masked (compared on both sides)."""
        ...

    def session_chunk(self, content: object) -> tuple[str, str] | None:
        """(final status, output) of one observation of a process session (``run.compare.mark_timing``)."""
        ...

    def write_rebuilt_prefix(
        self, plan: Plan, fresh: Mapping[str, FreshObservation], out_dir: Path
    ) -> NativePrefix: ...

    # -- continuation (spec.continues) ------------------------------------------------------------------------------

    def prepare_launch(self, trajectory: Trajectory, entrypoint: Path | None) -> LaunchTarget:
        """Resolve and probe the verified binary BEFORE anything runs (refusals consume no run id)."""
        ...

    def continue_run(
        self, plan: Plan, prefix: NativePrefix, context: RunContext, settings: ContinueSettings
    ) -> Continuation: ...


class TrajectoryParser(Protocol):
    """An agent's parse function: a native trajectory of at most ``max_bytes``."""

    def __call__(self, path: Path, max_bytes: int, /) -> Trajectory: ...


class AdapterBase:
    """What every adapter shares, driven by its ``spec``, and the defaults of the optional hooks; an adapter
    overrides what its agent needs."""

    spec: ClassVar[AgentSpec]
    #: the agent's parse function (``staticmethod(parse_x)``)
    parser: ClassVar[TrajectoryParser]
    #: why an unverified version is refused, after "is not a verified version"
    unverified_why: ClassVar[str] = ""

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def verified_versions(self) -> Mapping[str, str]:
        return self.spec.versions

    @property
    def native_format(self) -> str:
        return self.spec.native_format

    def parse(self, path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory:
        return self.parser(path, max_bytes)

    def profile_for(self, trajectory: Trajectory) -> str:
        """The profile of the one version the recording names, or raise unsupported_version."""
        from forkpoint.adapters.versions import label

        version = trajectory.version
        profile = self.spec.versions.get(version or "")
        if profile is None:
            raise unsupported_version(
                f"{self.spec.title} {label(version) or f'(no {self.spec.version_field})'} is not a verified version"
                f"{self.unverified_why} (verified: {', '.join(self.spec.versions)})")
        return profile

    def format_family(self, trajectory: Trajectory) -> str:
        """The format family the parser read (an agent with several overrides this from the parsed structure)."""
        return self.spec.formats[0].name

    def version_facts(self, trajectory: Trajectory) -> VersionFacts:
        from forkpoint.adapters.versions import resolve

        return resolve(self.spec, trajectory, self.format_family(trajectory))

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        """The native session cut after the boundary: HISTORICAL observations when ``fresh`` is None."""
        raise NotImplementedError

    def write_prepared_prefix(self, plan: Plan, out_dir: Path) -> NativePrefix:
        return self.write_prefix(plan, None, out_dir)

    def write_rebuilt_prefix(
        self, plan: Plan, fresh: Mapping[str, FreshObservation], out_dir: Path
    ) -> NativePrefix:
        return self.write_prefix(plan, fresh, out_dir)

    def prepare_launch(self, trajectory: Trajectory, entrypoint: Path | None) -> LaunchTarget:
        """The verified runtime of the recording's version (an explicit entrypoint is probed)."""
        from forkpoint.runtimes import resolve_entrypoint

        return resolve_entrypoint(self.name, trajectory.version or "", entrypoint)

    def hooks(self) -> AgentHooks[Any]:
        """The agent's hooks for the one continuation shell (an adapter that continues overrides this)."""
        raise ReplayError(ErrorKind.UNSUPPORTED_AGENT,
                          f"{self.spec.title} continuation is not available in this version")

    def continue_run(
        self, plan: Plan, prefix: NativePrefix, context: RunContext, settings: ContinueSettings
    ) -> Continuation:
        from forkpoint.adapters.kit.continuation import continue_with

        return continue_with(self.hooks(), plan, prefix, context, settings)

    def parse_completed(self, path: Path, companion: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory:
        """No companion file completes this agent's trajectories (request validation refuses one)."""
        raise configuration(f"a companion file ({companion}) does not complete this agent's trajectory {path}")

    def normalise_observation(self, content: object) -> object:
        """Nothing volatile: observations are compared as they are."""
        return content

    def session_chunk(self, content: object) -> tuple[str, str] | None:
        """No process sessions: no observation is split by timing."""
        return None
