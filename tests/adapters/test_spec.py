"""Every registered AgentSpec is self-consistent: versions <-> profiles <-> runtime <-> upstreams <-> adapter."""

from __future__ import annotations

import dataclasses
import importlib
import re
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpoint import adapters
from forkpoint.adapters import AGENT_NAMES, AGENTS, agent_spec, detection_order, exporter, get_adapter, upstream_help
from forkpoint.adapters.base import Adapter, AdapterBase
from forkpoint.adapters.claude_code import ClaudeCodeAdapter
from forkpoint.adapters.codex import CodexAdapter
from forkpoint.adapters.copilot_cli import CopilotCliAdapter
from forkpoint.adapters.detect import guess_agent_from_object
from forkpoint.adapters.gemini_cli import GeminiCliAdapter
from forkpoint.adapters.mini_swe_agent import MiniSweAgentAdapter
from forkpoint.adapters.opencode import OpenCodeAdapter
from forkpoint.adapters.openhands import OpenHandsAdapter
from forkpoint.adapters.openhands_sdk import OpenHandsSdkAdapter
from forkpoint.adapters.pi import PiAdapter
from forkpoint.adapters.qwen_code import QwenCodeAdapter
from forkpoint.adapters.spec import AgentSpec, NpmPackage, PythonPackage
from forkpoint.adapters.swe_agent import SweAgentAdapter
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.protocols import PROTOCOLS, STUB_CHOICE, UPSTREAMS

#: mypy checks that every adapter class satisfies the Adapter protocol (every hook, optional ones included)
_CONFORMING: tuple[Adapter, ...] = (ClaudeCodeAdapter(), CodexAdapter(), OpenCodeAdapter(), PiAdapter(),
                                    MiniSweAgentAdapter(), SweAgentAdapter(), OpenHandsAdapter(), GeminiCliAdapter(),
                                    CopilotCliAdapter(), QwenCodeAdapter(),
                                    OpenHandsSdkAdapter())
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
    # export: the converter lives in the agent's folder and is what `forkpoint export` uses for its runs
    module, _, function = spec.exporter.partition(":")
    assert module.startswith(spec.adapter.partition(":")[0] + ".")
    assert exporter(name) is getattr(importlib.import_module(module), function)


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
    """The CLI's --agent/--upstream/--seed help names no agent: argparse fills the lists from the registry (the
    stored texts that `--help` prints without importing a spec are argparse's, tests/test_cli.py)."""
    from forkpoint.cli.parser import _REPLAY_OPTIONS, MODEL_OPTIONS, build_parser, every_help

    derived = {option: text for option, _, _, text in (*_REPLAY_OPTIONS, *MODEL_OPTIONS)
               if option in ("--agent", "--upstream", "--seed")}
    assert len(derived) == 3
    for option, text in derived.items():  # the lists of agents are no literal (agent-specific options may name one)
        assert not any(re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) for name in AGENT_NAMES), option
    replay = _unwrapped(every_help(build_parser("replay"))["replay"])
    assert _unwrapped(f"Agent name: {', '.join(AGENT_NAMES)}.") in replay
    assert _unwrapped(upstream_help()) in replay
    assert _unwrapped("Chat Completions agents: opencode, pi, mini-swe-agent,") in replay


def _unwrapped(text: str) -> str:
    """Help text without its whitespace: argparse wraps at hyphens too (``mini-`` / ``swe-agent``)."""
    return "".join(text.split())


@pytest.fixture
def new_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A new agent as the docs say to add one: its folder (here a spec and a converter) and one registry line."""
    folder = tmp_path / "newagent"
    folder.mkdir()
    (folder / "__init__.py").write_text("")
    (folder / "spec.py").write_text(textwrap.dedent("""
        from forkpoint.adapters.spec import AgentSpec

        SPEC = AgentSpec(name="new-agent", title="New Agent", adapter="newagent:NewAdapter",
                         versions={"1.0.0": "new-agent/1.0.0/jsonl-v1"}, runtime=None,
                         native_format="new-agent/jsonl", protocol="openai-chat",
                         sniff=lambda value: isinstance(value, dict) and "new_agent_session" in value,
                         detection_priority=1, exporter="newagent.messages:to_chat")
    """))
    (folder / "messages.py").write_text(textwrap.dedent("""
        from forkpoint.export.chat import Conversation, user

        def to_chat(data):
            return Conversation(messages=[user(data.decode())])
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(AGENTS, "new-agent", "newagent.spec")
    monkeypatch.setattr(adapters, "AGENT_NAMES", (*AGENT_NAMES, "new-agent"))
    detection_order.cache_clear()
    try:
        yield "new-agent"
    finally:
        detection_order.cache_clear()
        for module in [m for m in sys.modules if m == "newagent" or m.startswith("newagent.")]:
            del sys.modules[module]


def test_an_agent_is_its_folder_and_one_registry_line(new_agent: str) -> None:
    """Detection, export and the CLI help follow the registry: nothing else names the agent."""
    from forkpoint.cli.parser import build_parser, every_help

    assert detection_order()[0] == new_agent  # its priority puts it first
    assert guess_agent_from_object({"new_agent_session": 1}) == new_agent
    assert guess_agent_from_object({"type": "session_meta", "payload": {}}) == "codex"
    convert = exporter(new_agent)
    assert convert is not None and convert(b"hello").messages == [{"role": "user", "content": "hello"}]
    replay = _unwrapped(every_help(build_parser("replay"))["replay"])
    assert _unwrapped(f"Agent name: {', '.join(AGENT_NAMES)}, {new_agent}.") in replay
    chat = ", ".join(n for n in AGENT_NAMES if agent_spec(n).protocol == "openai-chat")
    assert _unwrapped(f"{chat}, {new_agent}; OPENAI_API_KEY") in replay  # --upstream: the chat upstream's agents
    assert _unwrapped(f"Chat Completions agents: {chat}, {new_agent};") in replay


def test_a_lockstep_extra_requirement_follows_the_release_installed() -> None:
    """openhands-tools is released with openhands-sdk: a calibrated 1.58.1 SDK gets tools 1.58.1 (pinning the
    verified 1.58.2 beside it makes the install unsatisfiable)."""
    from forkpoint.adapters import agent_spec
    from forkpoint.adapters.spec import PythonPackage

    package = agent_spec("openhands-sdk").runtime
    assert isinstance(package, PythonPackage)
    assert package.extras("1.58.1") == ["openhands-tools==1.58.1"]
    assert package.extras("1.58.2") == ["openhands-tools==1.58.2"]
