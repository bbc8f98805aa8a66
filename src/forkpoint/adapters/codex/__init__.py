"""Codex adapter: rollout JSONL in, rebuilt rollout in an isolated CODEX_HOME + `codex exec resume` out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.codex.parse import CodexNative, parse_rollout
from forkpoint.adapters.codex.session import write_prepared, write_rebuilt
from forkpoint.adapters.codex.spec import SPEC
from forkpoint.core.model import FreshObservation, NativePrefix, Plan, RunContext, Trajectory, VersionFacts

if TYPE_CHECKING:
    from forkpoint.adapters.base import ToolExecutor
    from forkpoint.adapters.codex.launch import CodexHooks



class CodexAdapter(AdapterBase):
    spec = SPEC
    parser = staticmethod(parse_rollout)
    unverified_why = "; its rollout format is unknown to forkpoint"

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        session_id = plan.trajectory.session_id or plan.trajectory.source_path.stem
        destination = out_dir / _rollout_name(plan)
        digest = write_prepared(plan, destination) if fresh is None else write_rebuilt(plan, fresh, destination)
        return NativePrefix(destination, self.native_format, session_id, digest)

    def version_facts(self, trajectory: Trajectory) -> VersionFacts:
        """As every adapter's, plus a note naming each recorded-version tool profile its calls re-run with."""
        from forkpoint.adapters.codex.tool_exec import SHELL_JSON_PROFILE
        from forkpoint.adapters.codex.tools import NO_TRUNCATION_WARNING, shell_json_profile, truncation_warning

        facts = super().version_facts(trajectory)
        native = trajectory.native
        recorded = native.session_meta.get("cli_version") if isinstance(native, CodexNative) else None
        version = recorded if isinstance(recorded, str) else None
        notes = []
        if shell_json_profile(version):
            notes.append(f"its shell calls re-run with Codex {SHELL_JSON_PROFILE}'s shell tool (the recorded version's "
                         "profile)")
        if not truncation_warning(version):
            notes.append(f"its exec_command outputs re-run with the {NO_TRUNCATION_WARNING} (the recorded version's "
                         "profile: no 'Warning: truncated output' line)")
        return replace(facts, reasons=(*facts.reasons, *notes)) if notes else facts

    # -- replay -------------------------------------------------------------------------------------------------

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor:
        from forkpoint.adapters.codex.tools import CodexToolExecutor

        return CodexToolExecutor(context, plan.trajectory.version or "", native=plan.trajectory.native)

    def normalise_observation(self, content: object) -> object:
        """Documented volatile parts only (Chunk ID, Wall time: see tools.normalize_volatile)."""
        from forkpoint.adapters.codex.tools import normalize_volatile

        return normalize_volatile(content)

    def session_chunk(self, content: object) -> tuple[str, str] | None:
        """A unified exec observation's (status, output): see tool_session.session_chunk."""
        from forkpoint.adapters.codex.tool_session import session_chunk

        return session_chunk(content)

    # -- continuation ---------------------------------------------------------------------------------------------

    def hooks(self) -> CodexHooks:
        from forkpoint.adapters.codex.launch import CodexHooks

        return CodexHooks()


def _rollout_name(plan: Plan) -> str:
    name = plan.trajectory.source_path.name
    if name.startswith("rollout-") and name.endswith(".jsonl"):
        return name
    return f"rollout-{plan.trajectory.session_id}.jsonl"
