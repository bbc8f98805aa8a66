"""Every registered AgentSpec is self-consistent: versions <-> profiles <-> runtime <-> upstreams <-> adapter."""

from __future__ import annotations

import dataclasses
import importlib
import re

import pytest

from forkpoint.adapters import AGENT_NAMES, AGENTS, agent_spec, get_adapter, upstream_help
from forkpoint.adapters.base import Adapter, AdapterBase
from forkpoint.adapters.claude_code import ClaudeCodeAdapter
from forkpoint.adapters.codex import CodexAdapter
from forkpoint.adapters.mini_swe_agent import MiniSweAgentAdapter
from forkpoint.adapters.opencode import OpenCodeAdapter
from forkpoint.adapters.openhands import OpenHandsAdapter
from forkpoint.adapters.pi import PiAdapter
from forkpoint.adapters.spec import AgentSpec, NpmPackage, PythonPackage
from forkpoint.adapters.swe_agent import SweAgentAdapter
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.protocols import PROTOCOLS, STUB_CHOICE, UPSTREAMS

#: mypy checks that every adapter class satisfies the Adapter protocol (every hook, optional ones included)
_CONFORMING: tuple[Adapter, ...] = (ClaudeCodeAdapter(), CodexAdapter(), OpenCodeAdapter(), PiAdapter(),
                                    MiniSweAgentAdapter(), SweAgentAdapter(), OpenHandsAdapter())
_VERSION = re.compile(r"\d+\.\d+\.\d+")


@pytest.mark.parametrize("name", AGENT_NAMES)
def test_spec_is_self_consistent(name: str) -> None:
    spec = agent_spec(name)
    assert isinstance(spec, AgentSpec) and spec.name == name
    assert AGENTS[name] == f"forkpoint.adapters.{name.replace('-', '_')}.spec"  # the spec lives in the agent's folder
    field = "name"
    with pytest.raises(dataclasses.FrozenInstanceError):  # no code can change an agent's facts at run time
        setattr(spec, field, "other")
    # versions <-> profiles: every verified version has its own profile, named agent/version/...
    assert spec.versions, name
    for version, profile in spec.versions.items():
        assert _VERSION.fullmatch(version), (name, version)
        assert profile.startswith(f"{name}/{version}/"), (name, profile)
    assert len(set(spec.versions.values())) == len(spec.versions)
    # runtime: an installable agent names its package; the kind decides the installer
    if spec.runtime is not None:
        assert isinstance(spec.runtime, NpmPackage | PythonPackage) and spec.runtime.package
        if isinstance(spec.runtime, PythonPackage):
            assert all(v in spec.versions for v in spec.runtime.python_for or {}), name
    # upstreams: the default speaks the agent's protocol, the stub is always there, all are known
    assert spec.default_upstream == UPSTREAMS[PROTOCOLS[spec.protocol].upstream]
    assert spec.default_upstream.protocol == spec.protocol
    assert STUB_CHOICE in spec.upstreams and all(UPSTREAMS[u.name] == u for u in spec.upstreams)
    assert spec.upstream(None) == spec.default_upstream and spec.upstream("unknown") is None
    assert "local" in spec.sandbox_features and spec.sandbox_features <= {"local", "bwrap", "path_map"}
    assert spec.replays or not spec.continues  # a continuation starts from a replayed boundary
    # adapter class: the one the spec names, with the spec's name and versions
    adapter = get_adapter(name)
    module, _, class_name = spec.adapter.partition(":")
    assert type(adapter) is vars(importlib.import_module(module))[class_name]
    assert isinstance(adapter, AdapterBase)
    assert adapter.name == name and adapter.verified_versions == spec.versions
    assert spec.native_format.startswith(f"{name}/") and adapter.native_format == spec.native_format


def test_every_adapter_is_registered() -> None:
    assert sorted(type(a).__name__ for a in _CONFORMING) == sorted(
        agent_spec(name).adapter.partition(":")[2] for name in AGENT_NAMES)


def test_the_optional_hook_defaults_to_no_normalisation() -> None:
    content = [{"type": "text", "text": "/tmp/x"}]
    assert get_adapter("openhands").normalise_observation(content) is content


def test_unknown_agent_is_a_configuration_error() -> None:
    with pytest.raises(ReplayError) as caught:
        agent_spec("gpt-engineer")
    assert caught.value.kind is ErrorKind.CONFIGURATION and "claude-code, codex" in caught.value.message


def test_cli_help_says_what_the_specs_say() -> None:
    """The CLI keeps its help literal (so `--help` imports no spec); it must list what the registry declares."""
    from forkpoint.cli.parser import _REPLAY_OPTIONS

    helps = {option: text for option, _, _, text in _REPLAY_OPTIONS}
    assert helps["--agent"] == f"Agent name: {', '.join(AGENT_NAMES)}."
    assert upstream_help() in helps["--upstream"]
