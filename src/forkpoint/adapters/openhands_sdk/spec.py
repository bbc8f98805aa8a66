"""OpenHands V1 SDK: the facts forkpoint's shared code needs (see forkpoint.adapters.spec)."""

from __future__ import annotations

from forkpoint.adapters.spec import AgentSpec, FormatFamily, PythonPackage

VERSION = "1.58.2"


def sniff(value: object) -> bool:
    """A V1 conversation export: an object with the SDK's event ``kind`` list (see parse.py)."""
    return isinstance(value, dict) and value.get("format") == "openhands-sdk/conversation-dir"


SPEC = AgentSpec(
    name="openhands-sdk",
    title="OpenHands SDK",
    adapter="forkpoint.adapters.openhands_sdk:OpenHandsSdkAdapter",
    versions={VERSION: f"openhands-sdk/{VERSION}/v1-event-log"},
    runtime=PythonPackage("openhands-sdk", "3.12", extra_packages=(f"openhands-tools=={VERSION}",)),
    native_format="openhands-sdk/v1-conversation-dir",
    protocol="openai-chat",
    sniff=sniff,
    detection_priority=75,
    exporter="forkpoint.adapters.openhands_sdk.messages:to_chat",
    version_field="the SDK version forkpoint records beside the conversation",
    formats=(FormatFamily("openhands-sdk/v1-event-log", VERSION, VERSION),),
    sandbox_features=frozenset({"local"}),
)
