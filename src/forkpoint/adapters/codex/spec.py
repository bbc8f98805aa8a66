"""Codex: the facts forkpoint's shared code needs (see forkpoint.adapters.spec)."""

from __future__ import annotations

from forkpoint.adapters.spec import OPENAI_CHAT, AgentSpec, NpmPackage


def sniff(value: object) -> bool:
    """A rollout line: ``session_meta`` first, then ``{"timestamp", "type", "payload": {...}}`` records."""
    if not isinstance(value, dict):
        return False
    return value.get("type") == "session_meta" or (isinstance(value.get("payload"), dict) and "timestamp" in value)


SPEC = AgentSpec(
    name="codex",
    title="Codex",
    adapter="forkpoint.adapters.codex:CodexAdapter",
    versions={
        "0.149.0": "codex/0.149.0/native-responses-jsonl-v1",
        "0.171.0": "codex/0.171.0/native-responses-jsonl-v1",
    },
    # bin/codex.js spawns node_modules/@openai/codex-<platform>/vendor/<target triple>/bin/codex, where
    # @openai/codex-<platform> is an npm alias of @openai/codex@<version>-<platform>
    runtime=NpmPackage("@openai/codex", "codex", "@openai/codex-", "vendor/*/bin/codex", run_native=True),
    native_format="codex/rollout-jsonl",
    protocol="openai-responses",
    more_upstreams=(OPENAI_CHAT,),
    sandbox_features=frozenset({"local", "bwrap", "path_map"}),
    sniff=sniff,
    detection_priority=10,  # its ``payload`` records are recognised before anything else
    exporter="forkpoint.adapters.codex.messages:to_chat",
    version_field="cli_version in session_meta",
    # proven by tests/e2e/test_cross_version.py
    cross_versions={"0.149.0": ("0.171.0",)},
)
