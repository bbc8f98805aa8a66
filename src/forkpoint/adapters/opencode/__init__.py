"""OpenCode adapter: a session export (or a run's event log) in; the session rebuilt in an isolated SQLite store
and continued with ``opencode run --session`` through the Chat Completions bridge out."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.opencode.parse import AGENT, parse_opencode
from forkpoint.adapters.opencode.session import cut_export, native_of, write_export
from forkpoint.adapters.opencode.spec import SPEC
from forkpoint.adapters.opencode.tool_profile import installed_release, line_binary, line_for
from forkpoint.core.errors import configuration, unsupported_version
from forkpoint.core.fs import DEFAULT_MAX_INPUT_BYTES
from forkpoint.core.model import FreshObservation, NativePrefix, Plan, RunContext, Trajectory, VersionFacts
from forkpoint.core.releases import number

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
        """An event log alone names no version nor the prompt: its export completes it (refused without). A
        release line with its own tool profile (tool_profile.LINES) names the binary its tools re-run with."""
        if trajectory.version is None:
            session = trajectory.session_id or "<session id>"
            raise unsupported_version(
                "an `opencode run --format=json` event log records neither the OpenCode version nor the user prompt; "
                f"pass the session's export as --opencode-export FILE (`opencode export {session} > FILE`, where the "
                "session was recorded), or replay that export itself")
        facts = super().version_facts(trajectory)
        line = line_for(facts.recorded) if facts.status != "verified" else None
        if line is None:
            return facts
        release = installed_release(line, facts.recorded)
        if release is not None:
            note = (f"the {line.label} tool profile: OpenCode {release}'s own binary re-runs the tools (its read, "
                    f"grep and error texts differ from {facts.tool_version}'s)")
            first = facts.reasons[0].replace(f"its tools re-run with {facts.tool_version}'s semantics",
                                             f"its tools re-run with the {line.label} tool profile") \
                if facts.reasons else None
        else:
            note = (f"the {line.label} tool profile needs an installed OpenCode {line.measured} (`forkpoint agents "
                    f"calibrate opencode@{line.measured}` installs it): its tools re-run with {facts.tool_version}'s "
                    "binary instead, whose read, grep and error texts differ")
            first = None
        reasons = (first, *facts.reasons[1:]) if first is not None else facts.reasons
        return replace(facts, reasons=(*reasons, note), tool_profile=line.label if release is not None else None)

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        destination = out_dir / f"{plan.trajectory.session_id}.json"
        digest = write_export(cut_export(plan, fresh), destination)
        return NativePrefix(destination, self.native_format, plan.trajectory.session_id, digest)

    # -- replay -------------------------------------------------------------------------------------------------

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor:
        from forkpoint.adapters.opencode.tools import OpenCodeToolExecutor
        from forkpoint.runtimes import resolve_entrypoint

        native = native_of(plan)
        recorded = plan.version.recorded if plan.version is not None and plan.version.status != "verified" else None
        line = line_for(recorded)
        own = line_binary(line, recorded) if line is not None else None
        if own is not None:
            entrypoint, version = own, installed_release(line, recorded) if line is not None else None
        else:
            target = resolve_entrypoint(AGENT, plan.trajectory.version or "", None)
            entrypoint, version = target.entrypoint, target.version
        return OpenCodeToolExecutor(context, entrypoint, shell=native.shell,
                                    error_events=line is None or own is None or line.error_events,
                                    recorded_cwd=plan.trajectory.cwd, version=number(version))

    def normalise_observation(self, content: object) -> object:
        """Documented volatile parts only (the saved-output path of a truncated bash output)."""
        from forkpoint.adapters.opencode.tools import normalize_volatile

        return normalize_volatile(content)

    # -- continuation ---------------------------------------------------------------------------------------------

    def hooks(self) -> OpenCodeHooks:
        from forkpoint.adapters.opencode.launch import OpenCodeHooks

        return OpenCodeHooks()
