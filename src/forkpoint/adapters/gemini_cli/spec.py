"""Gemini CLI: the facts forkpoint's shared code needs (see forkpoint.adapters.spec)."""

from __future__ import annotations

from forkpoint.adapters.spec import AgentSpec, FormatFamily, NpmPackage


def sniff(value: object) -> bool:
    """The header line of a chat-recording JSONL: ``sessionId``, ``projectHash`` and ``startTime``."""
    return isinstance(value, dict) and all(isinstance(value.get(key), str)
                                           for key in ("sessionId", "projectHash", "startTime"))


NPM = NpmPackage("@google/gemini-cli", "gemini")
#: the one verified version (measured on the real binary: docs/adapters/gemini-cli.md)
VERSION = "0.61.0"

SPEC = AgentSpec(
    name="gemini-cli",
    title="Gemini CLI",
    adapter="forkpoint.adapters.gemini_cli:GeminiCliAdapter",
    versions={VERSION: "gemini-cli/0.61.0/session-file-v1"},
    runtime=NPM,
    native_format="gemini-cli/chat-recording-jsonl",
    protocol="google-generate-content",
    more_upstreams=("openai-chat",),
    sandbox_features=frozenset({"local", "bwrap"}),
    sniff=sniff,
    formats=(FormatFamily("gemini-cli/chat-recording-jsonl", "0.61.0", None),),
    detection_priority=35,  # its header's keys are its own; asked after pi, before claude-code
    exporter="forkpoint.adapters.gemini_cli.messages:to_chat",
    version_field="(none: Gemini CLI's session files name no CLI version)",
)
