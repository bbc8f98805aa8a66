"""Adapter registry: agent name -> "module:attribute", imported only when that agent is used."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from forkpoint.errors import ErrorKind, ReplayError

if TYPE_CHECKING:
    from forkpoint.adapters.base import Adapter

#: Every agent forkpoint knows; adapters are added to ADAPTERS as they are built.
AGENT_NAMES: tuple[str, ...] = (
    "claude-code",
    "codex",
    "opencode",
    "pi",
    "mini-swe-agent",
    "swe-agent",
    "openhands",
)

ADAPTERS: dict[str, str] = {
    "claude-code": "forkpoint.adapters.claude_code:ClaudeCodeAdapter",
    "codex": "forkpoint.adapters.codex:CodexAdapter",
    "mini-swe-agent": "forkpoint.adapters.mini_swe_agent:MiniSweAgentAdapter",
    "opencode": "forkpoint.adapters.opencode:OpenCodeAdapter",
    "pi": "forkpoint.adapters.pi:PiAdapter",
    "swe-agent": "forkpoint.adapters.swe_agent:SweAgentAdapter",
    "openhands": "forkpoint.adapters.openhands:OpenHandsAdapter",
}


def unknown_agent_message(name: str) -> str:
    return f"unsupported agent {name!r}; expected one of: {', '.join(AGENT_NAMES)}"


def get_adapter(name: str) -> Adapter:
    if name not in AGENT_NAMES:
        raise ReplayError(ErrorKind.CONFIGURATION, unknown_agent_message(name))
    target = ADAPTERS.get(name)
    if target is None:
        built = ", ".join(ADAPTERS)
        raise ReplayError(
            ErrorKind.UNSUPPORTED_AGENT,
            f"agent {name!r} is known but its adapter is not available in this forkpoint version "
            f"(available: {built})",
        )
    module_name, _, attribute = target.partition(":")
    adapter_class = getattr(importlib.import_module(module_name), attribute)
    adapter: Adapter = adapter_class()
    return adapter


def available_adapters() -> list[str]:
    return list(ADAPTERS)
