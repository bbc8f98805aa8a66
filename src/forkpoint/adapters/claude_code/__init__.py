"""Claude Code adapter: native session JSONL in, rebuilt session + `claude --resume` out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.adapters.base import AdapterBase
from forkpoint.adapters.claude_code.parse import AGENT, parse_session
from forkpoint.adapters.claude_code.session import write_prepared, write_rebuilt
from forkpoint.adapters.claude_code.spec import SPEC
from forkpoint.errors import unsupported_version
from forkpoint.fs import DEFAULT_MAX_INPUT_BYTES
from forkpoint.model import FreshObservation, NativePrefix, Plan, RunContext, Trajectory

if TYPE_CHECKING:
    from forkpoint.adapters.base import ToolExecutor
    from forkpoint.adapters.claude_code.launch import ClaudeHooks



class ClaudeCodeAdapter(AdapterBase):
    name = AGENT
    verified_versions = SPEC.versions
    native_format = "claude-code/session-jsonl"

    def sniff(self, head: bytes) -> bool:
        return b'"parentUuid"' in head and b'"sessionId"' in head

    def parse(self, path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> Trajectory:
        return parse_session(path, max_bytes)

    def profile_for(self, trajectory: Trajectory) -> str:
        versions = sorted(trajectory.versions)
        if len(versions) != 1:
            found = ", ".join(versions) if versions else "none"
            raise unsupported_version(
                f"Claude Code session must be recorded by exactly one version; found {found} "
                f"(verified: {', '.join(self.verified_versions)})"
            )
        profile = self.verified_versions.get(versions[0])
        if profile is None:
            raise unsupported_version(
                f"Claude Code {versions[0]} is not a verified version; its session format is unknown to "
                f"forkpoint (verified: {', '.join(self.verified_versions)})"
            )
        return profile

    def write_prefix(self, plan: Plan, fresh: Mapping[str, FreshObservation] | None, out_dir: Path) -> NativePrefix:
        destination = out_dir / f"{_session_id(plan)}.jsonl"
        if fresh is None:
            out_dir.mkdir(parents=True, exist_ok=True)
            digest = write_prepared(plan, destination)
        else:
            digest = write_rebuilt(plan, fresh, destination)
        return NativePrefix(destination, self.native_format, _session_id(plan), digest)

    # -- replay -------------------------------------------------------------------------------------------------

    def executor(self, plan: Plan, context: RunContext) -> ToolExecutor:
        from forkpoint.adapters.claude_code.launch import config_dir
        from forkpoint.adapters.claude_code.tools import ClaudeToolExecutor

        version = plan.trajectory.version or ""
        return ClaudeToolExecutor(context, version, _session_id(plan), config_dir(context.home))

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
