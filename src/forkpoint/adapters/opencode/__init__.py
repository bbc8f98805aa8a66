"""OpenCode adapter: a session export (or a run's event log) in; the session rebuilt in an isolated SQLite store
and continued with ``opencode run --session`` through the Chat Completions bridge out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.opencode.parse import AGENT, parse_opencode
from forkpoint.adapters.opencode.session import cut_export, native_of, write_export
from forkpoint.adapters.opencode.spec import SPEC
from forkpoint.core.errors import configuration, unsupported_version
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES
from forkpoint.core.model import FreshObservation, NativePrefix, Plan, RunContext, Trajectory, VersionFacts

if TYPE_CHECKING:
    from forkpoint.adapters.base import ToolExecutor
    from forkpoint.adapters.opencode.launch import OpenCodeHooks



class OpenCodeAdapter(AdapterBase):
    spec = SPEC
    parser = staticmethod(parse_opencode)

    def parse_completed(self, path: Path, companion: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory:
        """A ``run --format=json`` event log completed by the session's ``opencode export`` (``--opencode-export``)."""
        if not companion.is_file():
            raise configuration(f"opencode_export is not a regular file: {companion}")
        return parse_opencode(path, export=companion.resolve(), max_bytes=max_bytes)

    def profile_for(self, trajectory: Trajectory) -> str:
        """An event log alone names no version: its export completes it."""
        self.version_facts(trajectory)
        return super().profile_for(trajectory)

    def version_facts(self, trajectory: Trajectory) -> VersionFacts:
        """An event log alone names no version nor the prompt: its export completes it (refused without)."""
        if trajectory.version is None:
            session = trajectory.session_id or "<session id>"
            raise unsupported_version(
                "an `opencode run --format=json` event log records neither the OpenCode version nor the user prompt; "
                f"pass the session's export as --opencode-export FILE (`opencode export {session} > FILE`, where the "
                "session was recorded), or replay that export itself")
        return super().version_facts(trajectory)

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        destination = out_dir / f"{plan.trajectory.session_id}.json"
        digest = write_export(cut_export(plan, fresh), destination)
        return NativePrefix(destination, self.native_format, plan.trajectory.session_id, digest)

    # -- replay -------------------------------------------------------------------------------------------------

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor:
        from forkpoint.adapters.opencode.tools import OpenCodeToolExecutor
        from forkpoint.runtimes import resolve_entrypoint

        native = native_of(plan)
        target = resolve_entrypoint(AGENT, plan.trajectory.version or "", None)
        return OpenCodeToolExecutor(context, target.entrypoint, shell=native.shell,
                                    recorded_cwd=plan.trajectory.cwd)

    def normalise_observation(self, content: object) -> object:
        """Documented volatile parts only (the saved-output path of a truncated bash output)."""
        from forkpoint.adapters.opencode.tools import normalize_volatile

        return normalize_volatile(content)

    # -- continuation ---------------------------------------------------------------------------------------------

    def hooks(self) -> OpenCodeHooks:
        from forkpoint.adapters.opencode.launch import OpenCodeHooks

        return OpenCodeHooks()
