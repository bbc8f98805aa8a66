"""OpenHands V1 SDK: the facts forkpoint's shared code needs (see forkpoint.adapters.spec)."""

from __future__ import annotations

from forkpoint.adapters.spec import AgentSpec, FormatFamily, PythonPackage

VERSION = "1.58.2"


#: forkpoint's bundle of one SDK conversation (the prefixes and continued conversations it writes)
BUNDLE = "forkpoint.openhands-sdk-conversation/v1"


def sniff(value: object) -> bool:
    """A conversation's ``base_state.json`` (its agent, workspace and persistence dir), or forkpoint's bundle."""
    if not isinstance(value, dict):
        return False
    return value.get("schema") == BUNDLE or (isinstance(value.get("agent"), dict) and "persistence_dir" in value
                                             and isinstance(value.get("workspace"), dict))


SPEC = AgentSpec(
    name="openhands-sdk",
    title="OpenHands SDK",
    adapter="forkpoint.adapters.openhands_sdk:OpenHandsSdkAdapter",
    versions={VERSION: f"openhands-sdk/{VERSION}/v1-event-log"},
    runtime=PythonPackage("openhands-sdk", "3.12", extra_packages=("openhands-tools=={version}",)),
    native_format="openhands-sdk/v1-conversation-dir",
    protocol="openai-chat",
    sniff=sniff,
    detection_priority=75,
    exporter="forkpoint.adapters.openhands_sdk.messages:to_chat",
    version_field="base_state.json and the events carry none",
    formats=(FormatFamily("openhands-sdk/v1-event-log", VERSION, VERSION),),
    sandbox_features=frozenset({"local", "bwrap"}),
)
