"""Claude Code adapter: native session JSONL in, rebuilt session + `claude --resume` out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.claude_code.parse import parse_session
from forkpoint.adapters.claude_code.session import subagent_files, write_prepared, write_rebuilt
from forkpoint.adapters.claude_code.spec import SPEC
from forkpoint.core.errors import unsupported_version
from forkpoint.core.model import FreshObservation, NativePrefix, Plan, RunContext, Trajectory, VersionFacts

if TYPE_CHECKING:
    from forkpoint.adapters.base import ToolExecutor
    from forkpoint.adapters.claude_code.launch import ClaudeHooks



class ClaudeCodeAdapter(AdapterBase):
    spec = SPEC
    parser = staticmethod(parse_session)
    unverified_why = "; its session format is unknown to forkpoint"

    def profile_for(self, trajectory: Trajectory) -> str:
        """Every line names the version that wrote it: a session resumed by another version is refused."""
        if len(trajectory.versions) != 1:
            found = ", ".join(sorted(trajectory.versions)) or "none"
            raise unsupported_version(
                f"Claude Code session must be recorded by exactly one version; found {found} "
                f"(verified: {', '.join(self.verified_versions)})"
            )
        return super().profile_for(trajectory)

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        from forkpoint.core.results import write_atomic

        destination = out_dir / f"{_session_id(plan)}.jsonl"
        if fresh is None:
            out_dir.mkdir(parents=True, exist_ok=True)
            digest = write_prepared(plan, destination)
        else:
            digest = write_rebuilt(plan, fresh, destination)
        extra = []
        for relative, data in subagent_files(plan, fresh):  # relative: checked ids only (subagents.transcript_paths)
            path = out_dir / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, data)
            extra.append(path)
        return NativePrefix(destination, self.native_format, _session_id(plan), digest, tuple(extra))

    # -- replay -------------------------------------------------------------------------------------------------

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor:
        from forkpoint.adapters.claude_code.launch import config_dir
        from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor

        version = plan.trajectory.version or ""
        recorded = plan.version.recorded if plan.version is not None else None
        return ClaudeToolExecutor(context, version, _session_id(plan), config_dir(context.home), context.agent_home,
                                  recorded=recorded)

    def version_facts(self, trajectory: Trajectory) -> VersionFacts:
        """A 1.0.x, 2.0.x or 2.1.94-2.1.126 recording re-runs with its measured tool profile, named in the result."""
        facts = super().version_facts(trajectory)
        if facts.status != "verified" and (facts.recorded or "").startswith("2.1."):
            from dataclasses import replace

            from forkpoint.adapters.claude_code.tool_profile import NO_CONTEXT_NOTE, no_context_note

            if no_context_note(facts.recorded):
                note = (f"its tools re-run with the {NO_CONTEXT_NOTE.label} tool profile (the recorded version's: "
                        "Write and Edit answer without 'file state is current in your context')")
                return replace(facts, reasons=(*facts.reasons, note), tool_profile=NO_CONTEXT_NOTE.label)
        if facts.status != "unverified" or not (facts.recorded or "").startswith(("1.0.", "2.0.")):
            return facts  # (the tool modules load only for replay: prepare-only of a verified session needs none)
        from dataclasses import replace

        from forkpoint.adapters.claude_code.tool_profile import is_v2_0, v2_0_profile

        if not is_v2_0(facts.recorded):
            return facts
        label = v2_0_profile(facts.recorded or "").label
        first = (f"Claude Code {facts.recorded} is not a verified version: read as {facts.format_family}, its tools "
                 f"re-run with the {label} tool profile (cat -n Read with its reminder, snippet Write/Edit texts, "
                 f"inline Bash, TodoWrite); the session is continued as {facts.tool_version}'s")
        return replace(facts, reasons=(first, *facts.reasons[1:]), tool_profile=label)

    def normalise_observation(self, content: object) -> object:
        """Documented volatile parts only: the persisted-output file path (see tools.normalize_volatile)."""
        from forkpoint.adapters.claude_code.tools import normalize_volatile

        return normalize_volatile(content)

    # -- continuation ---------------------------------------------------------------------------------------------

    def hooks(self) -> ClaudeHooks:
        from forkpoint.adapters.claude_code.launch import ClaudeHooks

        return ClaudeHooks()


def _session_id(plan: Plan) -> str:
    return plan.trajectory.session_id or plan.trajectory.source_path.stem
