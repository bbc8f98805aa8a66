"""mini-swe-agent adapter: ``*.traj.json`` in (1.x and 2.x schemas), rebuilt trajectory + the real agent out.

The agent never runs inside forkpoint: a companion runner (companion.py) runs in the verified runtime's venv
(``forkpoint agents install mini-swe-agent@<version>``) and does the package-specific work over a socket (see
runner.py and docs/adapters/mini-swe-agent.md).
"""

from __future__ import annotations

import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.mini_swe_agent.parse import AGENT, FORMAT_V1, FORMAT_V2, MiniNative, parse_trajectory
from forkpoint.adapters.mini_swe_agent.spec import SPEC
from forkpoint.core.errors import unsupported_version
from forkpoint.core.model import FreshObservation, LaunchTarget, Mode, NativePrefix, Plan, RunContext, Trajectory

if TYPE_CHECKING:
    from forkpoint.adapters.base import ToolExecutor
    from forkpoint.adapters.mini_swe_agent.launch import MiniHooks
    from forkpoint.adapters.mini_swe_agent.runner import RunnerSession

#: the trajectory format each verified version writes
FORMATS = {"1.17.5": FORMAT_V1, "2.4.6": FORMAT_V2}
SUPPORTED_MODELS = {
    1: frozenset({"minisweagent.models.litellm_model.LitellmModel"}),
    2: frozenset({"minisweagent.models.litellm_model.LitellmModel",
                  "minisweagent.models.litellm_textbased_model.LitellmTextbasedModel"}),
}


class MiniSweAgentAdapter(AdapterBase):
    spec = SPEC
    parser = staticmethod(parse_trajectory)

    def __init__(self) -> None:
        self._python: Path | None = None
        self._warm: RunnerSession | None = None  # the replay's companion, kept for the continuation

    def profile_for(self, trajectory: Trajectory) -> str:
        """A verified version, writing the trajectory format that version writes."""
        profile = super().profile_for(trajectory)
        version = trajectory.version
        native: MiniNative = trajectory.native
        if native.format != FORMATS[version or ""]:
            raise unsupported_version(f"mini-swe-agent {version} writes trajectory_format {FORMATS[version or '']!r}, "
                                      f"this file says {native.format!r}")
        return profile

    def format_family(self, trajectory: Trajectory) -> str:
        """``trajectory_format`` (none on 1.1-1.3: the first schema)."""
        native: MiniNative = trajectory.native
        return native.format or FORMAT_V1

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        from forkpoint.adapters.mini_swe_agent.session import prepared_messages, rebuilt_messages, write

        messages = prepared_messages(plan) if fresh is None else rebuilt_messages(plan, fresh)
        destination = out_dir / _name(plan)
        return NativePrefix(destination, self.native_format, None, write(plan, messages, destination))

    # -- replay -------------------------------------------------------------------------------------------------

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor:
        from forkpoint.adapters.mini_swe_agent.tools import MiniToolExecutor

        python = self._python or self._runtime(plan.trajectory).entrypoint
        keep = self._keep if plan.mode is Mode.REPLAY_AND_CONTINUE else None
        return MiniToolExecutor(plan, context, python, keep)

    def _keep(self, session: RunnerSession) -> None:
        """Keep the replay's companion for continue_run; closed with the adapter if the run stops before."""
        if self._warm is not None:
            self._warm.close()
        self._warm = session
        weakref.finalize(self, session.close)

    # -- continuation ---------------------------------------------------------------------------------------------

    def _runtime(self, trajectory: Trajectory, entrypoint: Path | None = None) -> LaunchTarget:
        """The venv Python of the version that wrote the recording (an explicit one is probed)."""
        from forkpoint.runtimes import resolve_entrypoint

        target = resolve_entrypoint(AGENT, trajectory.version or "", entrypoint)
        self._python = target.entrypoint
        return target

    def prepare_launch(self, trajectory: Trajectory, entrypoint: Path | None) -> LaunchTarget:
        """Only a continuation talks to a model: its class must go through the bridge (prepare-only and replay-only
        of e.g. a ``DeterministicModel`` recording need none)."""
        native: MiniNative = trajectory.native
        config = native.data.get("info", {}).get("config", {})
        model_type = config.get("model_type") if isinstance(config, dict) else None
        if model_type not in SUPPORTED_MODELS[native.major]:
            raise unsupported_version(f"mini-swe-agent model class {model_type!r} cannot be continued through the "
                                      f"bridge (supported: {', '.join(sorted(SUPPORTED_MODELS[native.major]))}); "
                                      "--prepare-only and --replay-only need no model")
        return self._runtime(trajectory, entrypoint)

    def hooks(self) -> MiniHooks:
        """Hands the replay's warm companion (if any) to this continuation."""
        from forkpoint.adapters.mini_swe_agent.launch import MiniHooks

        warm, self._warm = self._warm, None
        return MiniHooks(warm)


def _name(plan: Plan) -> str:
    name = plan.trajectory.source_path.name
    return name if name.endswith(".json") else f"{name}.traj.json"


__all__ = ["AGENT", "MiniSweAgentAdapter"]
