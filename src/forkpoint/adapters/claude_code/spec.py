"""Claude Code: the facts forkpoint's shared code needs (see forkpoint.adapters.spec)."""

from __future__ import annotations

from forkpoint.adapters.spec import AgentSpec, FormatFamily, NpmPackage

#: record types Claude Code writes before (or instead of) its first message line
_BOOKKEEPING = ("queue-operation", "summary", "last-prompt", "file-history-snapshot")
_STREAM_JSON = ("system", "assistant", "user", "result")


def sniff(value: object) -> bool:
    if not isinstance(value, dict):
        return False
    if "session_id" in value and "parentUuid" not in value and value.get("type") in _STREAM_JSON:
        return True  # `claude -p --output-format stream-json` stdout: detected so the parser can name it
    return ("uuid" in value and ("parentUuid" in value or "sessionId" in value)) or value.get("type") in _BOOKKEEPING


SPEC = AgentSpec(
    name="claude-code",
    title="Claude Code",
    adapter="forkpoint.adapters.claude_code:ClaudeCodeAdapter",
    versions={
        "2.1.220": "claude-code/2.1.220/native-resume-v1",
        "2.1.332": "claude-code/2.1.332/native-resume-v1",
    },
    runtime=NpmPackage("@anthropic-ai/claude-code", "claude", "@anthropic-ai/claude-code-", "claude"),
    native_format="claude-code/session-jsonl",
    protocol="anthropic-messages",
    more_upstreams=("openai-chat",),
    # the executor and continuation run through any sandbox, and rewrite recorded paths (--path-map)
    sandbox_features=frozenset({"local", "bwrap", "path_map"}),
    sniff=sniff,
    detection_priority=40,  # after the formats whose lines carry a ``type`` of their own
    exporter="forkpoint.adapters.claude_code.messages:to_chat",
    # proven by tests/e2e/test_cross_version.py
    cross_versions={"2.1.220": ("2.1.332",)},
    # one JSONL session format since 1.0 (public recordings 1.0.98 - 2.1.152 parse); a line's fields grow, not change
    formats=(FormatFamily("claude-code/session-jsonl", "1.0.0", None),),
)
