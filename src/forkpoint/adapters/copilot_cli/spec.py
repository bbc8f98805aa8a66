"""GitHub Copilot CLI: the facts forkpoint's shared code needs (see forkpoint.adapters.spec)."""

from __future__ import annotations

from forkpoint.adapters.spec import AgentSpec, FormatFamily, NpmPackage


def sniff(value: object) -> bool:
    """The first line of a session-state ``events.jsonl``: a ``session.start`` event from ``copilot-agent``."""
    if not isinstance(value, dict) or value.get("type") != "session.start":
        return False
    data = value.get("data")
    return (isinstance(data, dict) and isinstance(data.get("sessionId"), str)
            and isinstance(data.get("copilotVersion"), str) and data.get("producer") == "copilot-agent")


#: the one verified version (measured on the real binary: docs/adapters/copilot-cli.md)
VERSION = "1.0.102"

SPEC = AgentSpec(
    name="copilot-cli",
    title="GitHub Copilot CLI",
    adapter="forkpoint.adapters.copilot_cli:CopilotCliAdapter",
    versions={VERSION: "copilot-cli/1.0.102/session-events-v1"},
    runtime=NpmPackage("@github/copilot", "copilot", "@github/copilot-", "copilot", run_native=True,
                       probe_env=(("COPILOT_AUTO_UPDATE", "false"),)),
    native_format="copilot-cli/session-events-jsonl",
    # its BYOK provider (COPILOT_PROVIDER_BASE_URL, type "openai", wire API "completions") speaks Chat Completions
    protocol="openai-chat",
    sandbox_features=frozenset({"local", "bwrap"}),
    sniff=sniff,
    formats=(FormatFamily("copilot-cli/session-events-jsonl", "1.0.102", None),),
    detection_priority=37,  # its session.start event is its own; asked after gemini-cli, before claude-code
    exporter="forkpoint.adapters.copilot_cli.messages:to_chat",
    version_field="session.start data.copilotVersion",
)
