"""The installed Gemini CLI runtime, and the isolated HOME both its tool replay and its continuation run in."""

from __future__ import annotations

from pathlib import Path

from forkpoint.adapters.gemini_cli.spec import VERSION
from forkpoint.adapters.kit import npm_cli
from forkpoint.adapters.kit.npm_cli import AGENT_KEY, PROXY_SINK, NodeStart
from forkpoint.core.errors import ErrorKind
from forkpoint.core.model import JsonObject

__all__ = ["AGENT_KEY", "NODE_START", "PROXY_SINK", "SETTINGS", "gemini_env", "installed_entrypoint",
           "write_settings"]
#: in an image root: no relaunch for more heap (its ``--max-old-space-size``, half the memory, given up front)
NODE_START = NodeStart("GEMINI_CLI_NO_RELAUNCH")
#: API-key auth (the base URL then points at loopback); no telemetry, no update check, no usage statistics
SETTINGS: JsonObject = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}


def installed_entrypoint() -> Path:
    """The verified runtime's ``gemini`` (tool replay needs the CLI's own tools even without a continuation)."""
    return npm_cli.installed_entrypoint("gemini-cli", VERSION, "Gemini CLI")


def write_settings(home: Path, kind: ErrorKind) -> None:
    """``~/.gemini/settings.json`` in the isolated HOME, which replayed tools can write: no planted link followed."""
    npm_cli.write_settings(home, ".gemini/settings.json", SETTINGS, kind)


def gemini_env(home: Path, base_url: str) -> dict[str, str]:
    """No credentials, the isolated HOME, the model at ``base_url`` (loopback), every proxy at a closed port."""
    return npm_cli.isolated_env(home, ("GEMINI_", "GOOGLE_"), {"GEMINI_API_KEY": AGENT_KEY,
                                                             "GOOGLE_GEMINI_BASE_URL": base_url})
