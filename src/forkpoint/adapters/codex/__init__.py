"""Codex adapter: rollout JSONL in, rebuilt rollout in an isolated CODEX_HOME + `codex exec resume` out."""

from __future__ import annotations

from pathlib import Path

from forkpoint.adapters.codex.parse import AGENT, parse_rollout
from forkpoint.adapters.codex.session import write_prepared
from forkpoint.errors import unsupported_version
from forkpoint.model import NativePrefix, Plan, Trajectory

VERIFIED_VERSIONS = {
    "0.149.0": "codex/0.149.0/native-responses-jsonl-v1",
    "0.171.0": "codex/0.171.0/native-responses-jsonl-v1",
}


class CodexAdapter:
    name = AGENT
    verified_versions = VERIFIED_VERSIONS
    native_format = "codex/rollout-jsonl"
    upstreams = ("openai-responses", "stub")

    def sniff(self, head: bytes) -> bool:
        return b'"session_meta"' in head

    def parse(self, path: Path) -> Trajectory:
        return parse_rollout(path)

    def profile_for(self, trajectory: Trajectory) -> str:
        version = trajectory.version
        profile = VERIFIED_VERSIONS.get(version or "")
        if profile is None:
            raise unsupported_version(
                f"Codex {version or '(no cli_version in session_meta)'} is not a verified version; its rollout "
                f"format is unknown to forkpoint (verified: {', '.join(VERIFIED_VERSIONS)})"
            )
        return profile

    def write_prepared_prefix(self, plan: Plan, out_dir: Path) -> NativePrefix:
        session_id = plan.trajectory.session_id or plan.trajectory.source_path.stem
        destination = out_dir / plan.trajectory.source_path.name
        if not destination.name.startswith("rollout-"):
            destination = out_dir / f"rollout-{session_id}.jsonl"
        return NativePrefix(destination, self.native_format, session_id, write_prepared(plan, destination))
