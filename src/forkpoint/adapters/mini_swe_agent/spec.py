"""mini-swe-agent: the facts forkpoint's shared code needs (see forkpoint.adapters.spec)."""

from __future__ import annotations

from forkpoint.adapters.spec import AgentSpec, FormatFamily, PythonPackage


def sniff(value: object) -> bool:
    """A ``.traj.json`` document: 1.x names its ``trajectory_format``, 2.x has ``info`` and ``messages``."""
    return isinstance(value, dict) and ("trajectory_format" in value or ("messages" in value and "info" in value))


SPEC = AgentSpec(
    name="mini-swe-agent",
    title="mini-swe-agent",
    adapter="forkpoint.adapters.mini_swe_agent:MiniSweAgentAdapter",
    versions={
        "1.17.5": "mini-swe-agent/1.17.5/companion-v1",
        "2.4.6": "mini-swe-agent/2.4.6/companion-v1",
    },
    # 2.x depends on datasets/pyarrow and is verified on 3.12; 1.x on 3.11
    runtime=PythonPackage("mini-swe-agent", "3.11", {"2.4.6": "3.12"}),
    native_format="mini-swe-agent/traj-json",
    protocol="openai-chat",
    sniff=sniff,
    detection_priority=50,  # after opencode: its ``info`` has no ``ses_`` id
    exporter="forkpoint.adapters.mini_swe_agent.messages:to_chat",
    # the companion (replayed commands and the continued agent) runs in the run's sandbox; no --path-map
    sandbox_features=frozenset({"local", "bwrap"}),
    version_field="info.mini_version",
    # trajectory_format decides the family (1.1-1.3 wrote no key and read as the first)
    formats=(FormatFamily("mini-swe-agent-1", "1.1.0", "1.17.5"), FormatFamily("mini-swe-agent-1.1", "2.0.0", None)),
)
