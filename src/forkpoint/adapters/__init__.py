"""The agent registry: one line per agent (name -> its spec module), imported only when that agent is used.

Adding an agent = its folder (``spec.py`` with ``SPEC``, the adapter class it names) + one line here.
"""

from __future__ import annotations

import importlib
from functools import cache
from typing import TYPE_CHECKING

from forkpoint.core.errors import ErrorKind, ReplayError

if TYPE_CHECKING:
    from collections.abc import Callable

    from forkpoint.adapters.base import Adapter
    from forkpoint.adapters.spec import AgentSpec
    from forkpoint.export.chat import Conversation

#: Every agent forkpoint knows, in the order messages and help list them.
AGENTS: dict[str, str] = {
    "claude-code": "forkpoint.adapters.claude_code.spec",
    "codex": "forkpoint.adapters.codex.spec",
    "opencode": "forkpoint.adapters.opencode.spec",
    "pi": "forkpoint.adapters.pi.spec",
    "mini-swe-agent": "forkpoint.adapters.mini_swe_agent.spec",
    "swe-agent": "forkpoint.adapters.swe_agent.spec",
    "openhands": "forkpoint.adapters.openhands.spec",
    "gemini-cli": "forkpoint.adapters.gemini_cli.spec",
    "copilot-cli": "forkpoint.adapters.copilot_cli.spec",
    "qwen-code": "forkpoint.adapters.qwen_code.spec",
    "openhands-sdk": "forkpoint.adapters.openhands_sdk.spec",
}

AGENT_NAMES: tuple[str, ...] = tuple(AGENTS)


def unknown_agent_message(name: str) -> str:
    return f"unsupported agent {name!r}; expected one of: {', '.join(AGENT_NAMES)}"


def agent_spec(name: str) -> AgentSpec:
    """The agent's declared facts; a configuration error for a name forkpoint does not know."""
    module = AGENTS.get(name)
    if module is None:
        raise ReplayError(ErrorKind.CONFIGURATION, unknown_agent_message(name))
    spec: AgentSpec = importlib.import_module(module).SPEC
    return spec


def all_specs() -> list[AgentSpec]:
    """Every registered spec, in registry order (imports every agent's package)."""
    return [agent_spec(name) for name in AGENT_NAMES]


@cache
def detection_order() -> tuple[str, ...]:
    """The agents in the order detection asks their sniff: by each spec's ``detection_priority``."""
    return tuple(spec.name for spec in sorted(all_specs(), key=lambda spec: spec.detection_priority))


def exporter(name: object) -> Callable[[bytes], Conversation] | None:
    """The agent's native session -> chat converter (its spec's ``exporter``); None for a name forkpoint does not
    know (a run dir written by another forkpoint, or edited)."""
    if not isinstance(name, str) or name not in AGENTS:
        return None
    module_name, _, function = agent_spec(name).exporter.partition(":")
    convert: Callable[[bytes], Conversation] = getattr(importlib.import_module(module_name), function)
    return convert


def get_adapter(name: str) -> Adapter:
    module_name, _, class_name = agent_spec(name).adapter.partition(":")
    adapter_class = vars(importlib.import_module(module_name))[class_name]
    adapter: Adapter = adapter_class()
    return adapter


def upstream_help() -> str:
    """Which agents speak each real upstream, and its key: what `forkpoint replay --help` says of --upstream
    (the CLI keeps the text literal, so --help imports no spec; a test keeps the two equal)."""
    specs = all_specs()
    parts = []
    for upstream in dict.fromkeys(spec.default_upstream for spec in specs):
        users = ", ".join(spec.name for spec in specs if spec.default_upstream == upstream)
        parts.append(f"'{upstream.name}' ({users}; {upstream.key_env})")
    return ", ".join(parts)
