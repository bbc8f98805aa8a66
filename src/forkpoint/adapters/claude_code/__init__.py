"""Claude Code adapter: native session JSONL in, rebuilt session + `claude --resume` out."""

from __future__ import annotations

from pathlib import Path

from forkpoint.adapters.claude_code.parse import AGENT, parse_session
from forkpoint.adapters.claude_code.session import write_prepared
from forkpoint.errors import unsupported_version
from forkpoint.model import NativePrefix, Plan, Trajectory

VERIFIED_VERSIONS = {
    "2.1.220": "claude-code/2.1.220/native-resume-v1",
    "2.1.332": "claude-code/2.1.332/native-resume-v1",
}


class ClaudeCodeAdapter:
    name = AGENT
    verified_versions = VERIFIED_VERSIONS
    native_format = "claude-code/session-jsonl"

    def sniff(self, head: bytes) -> bool:
        return b'"parentUuid"' in head and b'"sessionId"' in head

    def parse(self, path: Path) -> Trajectory:
        return parse_session(path)

    def profile_for(self, trajectory: Trajectory) -> str:
        versions = sorted(trajectory.versions)
        if len(versions) != 1:
            found = ", ".join(versions) if versions else "none"
            raise unsupported_version(
                f"Claude Code session must be recorded by exactly one version; found {found} "
                f"(verified: {', '.join(VERIFIED_VERSIONS)})"
            )
        profile = VERIFIED_VERSIONS.get(versions[0])
        if profile is None:
            raise unsupported_version(
                f"Claude Code {versions[0]} is not a verified version; its session format is unknown to "
                f"forkpoint (verified: {', '.join(VERIFIED_VERSIONS)})"
            )
        return profile

    def write_prepared_prefix(self, plan: Plan, out_dir: Path) -> NativePrefix:
        session_id = plan.trajectory.session_id or plan.trajectory.source_path.stem
        destination = out_dir / f"{session_id}.jsonl"
        out_dir.mkdir(parents=True, exist_ok=True)
        digest = write_prepared(plan, destination)
        return NativePrefix(destination, self.native_format, session_id, digest)
