"""OpenHands: the facts forkpoint's shared code needs (see forkpoint.adapters.spec)."""

from __future__ import annotations

from forkpoint.adapters.spec import AgentSpec, FormatFamily, PythonPackage


def sniff(value: object) -> bool:
    """A v0 trajectory is a JSON array of events (every other agent writes objects)."""
    return isinstance(value, list)


SPEC = AgentSpec(
    name="openhands",
    title="OpenHands",
    adapter="forkpoint.adapters.openhands:OpenHandsAdapter",
    versions={"0.62.0": "openhands/0.62.0/v0-events-replay-manager"},
    # openhands-ai >= 0.10 requires Python >= 3.12 (on 3.11 pip silently picks 0.9.8)
    runtime=PythonPackage("openhands-ai", "3.12"),
    native_format="openhands/v0-trajectory-json",
    protocol="openai-chat",
    sniff=sniff,
    detection_priority=70,  # last: a bare list of events
    exporter="forkpoint.adapters.openhands.messages:to_chat",
    version_field="openhands_version in the system event",
    # the v0 event list; trajectories saved without a system event name no version
    formats=(FormatFamily("openhands/v0-events-json", "0.9.0", "0.62.0"),),
    # the runner (replayed actions and the continued agent) runs in the run's sandbox; no --path-map
    sandbox_features=frozenset({"local", "bwrap"}),
)
