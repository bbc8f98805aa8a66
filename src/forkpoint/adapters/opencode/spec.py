"""OpenCode: the facts forkpoint's shared code needs (see forkpoint.adapters.spec)."""

from __future__ import annotations

from forkpoint.adapters.spec import AgentSpec, FormatFamily, NpmPackage

_EVENTS = ("step_start", "step_finish", "tool_use", "text")


def sniff(value: object) -> bool:
    """A ``run --format=json`` event, or an ``opencode export`` (mini-swe-agent's ``info`` has no ``ses_`` id)."""
    if not isinstance(value, dict):
        return False
    if value.get("type") in _EVENTS and "sessionID" in value:
        return True
    info = value.get("info")
    return isinstance(info, dict) and str(info.get("id", "")).startswith("ses_") and "messages" in value


SPEC = AgentSpec(
    name="opencode",
    title="OpenCode",
    adapter="forkpoint.adapters.opencode:OpenCodeAdapter",
    versions={
        "1.17.11": "opencode/1.17.11/session-export-sqlite-v1",
        "1.18.33": "opencode/1.18.33/session-export-sqlite-v1",
    },
    # bin/opencode.exe is a placeholder that postinstall hardlinks to opencode-<platform>/bin/opencode (a Bun binary)
    runtime=NpmPackage("opencode-ai", "opencode", "opencode-", "bin/opencode"),
    native_format="opencode/session-export-json",
    protocol="openai-chat",
    sniff=sniff,
    # `opencode export` JSON (public exports of 1.2.5 parse)
    formats=(FormatFamily("opencode/session-export-json", "1.2.0", None),),
    detection_priority=20,  # an export's ``info.id`` (``ses_...``) is asked before mini-swe-agent's ``info``
    exporter="forkpoint.adapters.opencode.messages:to_chat",
    # the tool host, import/export and the continuation run through any sandbox (the binary bound read-only)
    sandbox_features=frozenset({"local", "bwrap"}),
)
