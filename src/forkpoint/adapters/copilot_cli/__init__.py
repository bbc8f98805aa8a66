"""GitHub Copilot CLI adapter: a 1.0.102 session-state ``events.jsonl`` in, its tools re-run by the real binary,
a rebuilt event log out and the real ``copilot --resume`` continued on its BYOK provider = the bridge."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.copilot_cli.parse import parse_copilot
from forkpoint.adapters.copilot_cli.spec import SPEC
from forkpoint.core.model import FreshObservation, LaunchTarget, NativePrefix, Plan, RunContext, Trajectory

if TYPE_CHECKING:
    from forkpoint.adapters.base import ToolExecutor
    from forkpoint.adapters.copilot_cli.launch import CopilotHooks


class CopilotCliAdapter(AdapterBase):
    spec = SPEC
    parser = staticmethod(parse_copilot)

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        from forkpoint.adapters.copilot_cli.session import FILE_NAME, write_session

        destination = out_dir / FILE_NAME
        return NativePrefix(destination, self.native_format, plan.trajectory.session_id,
                            write_session(plan, fresh, destination))

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor:
        from forkpoint.adapters.copilot_cli.tools import CopilotToolExecutor

        return CopilotToolExecutor(context)

    def normalise_observation(self, content: object) -> object:
        """Documented volatile part only: the shell id the bash tool reports (it restarts in every process)."""
        from forkpoint.adapters.copilot_cli.tools import normalize_volatile

        return normalize_volatile(content)

    def prepare_launch(self, trajectory: Trajectory, entrypoint: Path | None) -> LaunchTarget:
        from forkpoint.adapters.copilot_cli.launch import recorded_model

        recorded_model(trajectory.native)
        return super().prepare_launch(trajectory, entrypoint)

    def hooks(self) -> CopilotHooks:
        from forkpoint.adapters.copilot_cli.launch import CopilotHooks

        return CopilotHooks()
