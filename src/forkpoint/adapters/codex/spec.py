"""Codex: the facts forkpoint's shared code needs (see forkpoint.adapters.spec)."""

from __future__ import annotations

from forkpoint.adapters.spec import AgentSpec, FormatFamily, NpmPackage

#: the event types of ``codex exec --json`` stdout (not a rollout: detected to be named, then refused by the parser)
EXEC_JSON_EVENTS = frozenset({"thread.started", "turn.started", "turn.completed", "turn.failed", "item.started",
                              "item.updated", "item.completed"})


def exec_json_event(value: object) -> bool:
    """A line of ``codex exec --json`` stdout: the thread/turn/item events, or the older ``{id, msg}`` events."""
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    return (isinstance(kind, str) and kind in EXEC_JSON_EVENTS) or (isinstance(value.get("msg"), dict)
                                                                    and "id" in value and "payload" not in value)


def sniff(value: object) -> bool:
    """A rollout line: ``session_meta`` first, then ``{"timestamp", "type", "payload": {...}}`` records (and
    ``codex exec --json`` stdout, which the parser names and refuses)."""
    if not isinstance(value, dict):
        return False
    return (value.get("type") == "session_meta" or (isinstance(value.get("payload"), dict) and "timestamp" in value)
            or exec_json_event(value))


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
    runtime=NpmPackage("@openai/codex", "codex", "@openai/codex-", "vendor/*/bin/codex", run_native=True,
                       older_native_binaries=("vendor/*/codex/codex",)),
    native_format="codex/rollout-jsonl",
    protocol="openai-responses",
    more_upstreams=("openai-chat",),
    sandbox_features=frozenset({"local", "bwrap", "path_map"}),
    sniff=sniff,
    detection_priority=10,  # its ``payload`` records are recognised before anything else
    exporter="forkpoint.adapters.codex.messages:to_chat",
    version_field="cli_version in session_meta",
    # proven by tests/e2e/test_cross_version.py
    cross_versions={"0.149.0": ("0.171.0",)},
    # rollout JSONL with session_meta/response_item records (public recordings 0.40.0 - 0.135.0 parse)
    formats=(FormatFamily("codex/rollout-jsonl", "0.40.0", None),),
)
