"""Qwen Code: the facts forkpoint's shared code needs (see forkpoint.adapters.spec)."""

from __future__ import annotations

from forkpoint.adapters.spec import AgentSpec, FormatFamily, NpmPackage


def sniff(value: object) -> bool:
    """A chat-recording record: ``uuid``, ``sessionId`` and a ``message`` whose content is Gemini ``parts`` (Claude
    Code's records share the first keys but carry ``message.content``), or a ``system`` record with its payload."""
    if not isinstance(value, dict) or not isinstance(value.get("uuid"), str) or "sessionId" not in value:
        return False
    message = value.get("message")
    return (isinstance(message, dict) and isinstance(message.get("parts"), list)) or "systemPayload" in value


NPM = NpmPackage("@qwen-code/qwen-code", "qwen")
#: the one verified version (measured on the real binary: docs/adapters/qwen-code.md)
VERSION = "0.24.4"

SPEC = AgentSpec(
    name="qwen-code",
    title="Qwen Code",
    adapter="forkpoint.adapters.qwen_code:QwenCodeAdapter",
    versions={VERSION: "qwen-code/0.24.4/resume-v1"},
    runtime=NPM,
    native_format="qwen-code/chat-recording-jsonl",
    protocol="openai-chat",
    sandbox_features=frozenset({"local", "bwrap"}),
    sniff=sniff,
    formats=(FormatFamily("qwen-code/chat-recording-jsonl", "0.24.4", None),),
    detection_priority=38,  # its records look like Claude Code's (uuid, parentUuid, sessionId): asked just before
    exporter="forkpoint.adapters.qwen_code.messages:to_chat",
    version_field="version on every record",
)
