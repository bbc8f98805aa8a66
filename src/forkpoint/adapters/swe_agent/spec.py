"""SWE-agent: the facts forkpoint's shared code needs (see forkpoint.adapters.spec)."""

from __future__ import annotations

from forkpoint.adapters.spec import AgentSpec, FormatFamily


def sniff(value: object) -> bool:
    """A ``.traj`` document: the ``trajectory`` steps and the model ``history``."""
    return isinstance(value, dict) and "trajectory" in value and "history" in value


SPEC = AgentSpec(
    name="swe-agent",
    title="SWE-agent",
    adapter="forkpoint.adapters.swe_agent:SweAgentAdapter",
    versions={"1.1.0": "swe-agent/1.1.0/traj-v1"},
    runtime=None,  # not on PyPI: only an explicit --agent-entrypoint (see the adapter's NOT_ON_PYPI)
    native_format="swe-agent/traj",
    protocol="openai-chat",
    sniff=sniff,
    detection_priority=60,  # after mini-swe-agent
    exporter="forkpoint.adapters.swe_agent.messages:to_chat",
    version_field="info.swe_agent_version",
    # 1.x .traj; 1.0-dev files without replay_config (and without a version) read as the same family
    formats=(FormatFamily("swe-agent/traj", "1.0.0", None),),
    # the emulated shell (and its bundle tools) runs in the run's sandbox; no --path-map
    sandbox_features=frozenset({"local", "bwrap"}),
    # continues=True: its prepare_launch gives the precise refusal (no verified continuation runner yet)
)
