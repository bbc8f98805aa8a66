"""GitHub Copilot CLI adapter: a 1.0.102 session-state ``events.jsonl`` in, its tools re-run by the real binary,
a rebuilt event log out (continuation: docs/adapters/copilot-cli.md says what is measured and what is missing)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.copilot_cli.parse import parse_copilot
from forkpoint.adapters.copilot_cli.spec import SPEC
from forkpoint.core.model import FreshObservation, NativePrefix, Plan, RunContext

if TYPE_CHECKING:
    from forkpoint.adapters.base import ToolExecutor


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
