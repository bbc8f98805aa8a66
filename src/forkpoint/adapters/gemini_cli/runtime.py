"""The installed Gemini CLI runtime, and the isolated HOME both its tool replay and its continuation run in."""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from forkpoint.adapters.gemini_cli.spec import VERSION
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import refused_as, write_file_strict
from forkpoint.core.model import JsonObject
from forkpoint.process import sanitized_env
from forkpoint.sandbox import home_environment

#: the key the agent sends (the bridge and the tool host ignore it; the real upstream key never reaches the agent)
AGENT_KEY = "forkpoint-bridge"
PROXY_SINK = "http://127.0.0.1:9"  # nothing listens there: a background fetch fails at once
#: API-key auth (the base URL then points at loopback); no telemetry, no update check, no usage statistics
SETTINGS: JsonObject = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}


def installed_entrypoint() -> Path:
    """The verified runtime's ``gemini`` (tool replay needs the CLI's own tools even without a continuation)."""
    from forkpoint.runtimes import find

    runtime = find("gemini-cli", VERSION)
    if runtime is None:
        raise ReplayError(ErrorKind.CONFIGURATION, f"Gemini CLI {VERSION} is not installed; run `forkpoint agents "
                                                   f"install gemini-cli@{VERSION}` (its own tools re-run the calls)")
    return runtime.entrypoint


def write_settings(home: Path, kind: ErrorKind) -> None:
    """``~/.gemini/settings.json`` in the isolated HOME, which replayed tools can write: no planted link followed."""
    home.mkdir(parents=True, exist_ok=True)
    with refused_as(kind, f"write {home / '.gemini/settings.json'}"):
        write_file_strict(home, ".gemini/settings.json", orjson.dumps(SETTINGS))


def gemini_env(home: Path, base_url: str) -> dict[str, str]:
    """No credentials, the isolated HOME, the model at ``base_url`` (loopback), every proxy at a closed port."""
    env = home_environment(sanitized_env(os.environ, strip_credentials=True), home)
    for name in list(env):
        if name.startswith(("GEMINI_", "GOOGLE_")) or name.lower() in ("http_proxy", "https_proxy", "all_proxy"):
            del env[name]
    env.update({"GEMINI_API_KEY": AGENT_KEY, "GOOGLE_GEMINI_BASE_URL": base_url,
                "HTTP_PROXY": PROXY_SINK, "HTTPS_PROXY": PROXY_SINK, "http_proxy": PROXY_SINK,
                "https_proxy": PROXY_SINK, "NO_PROXY": "127.0.0.1,localhost,::1", "no_proxy": "127.0.0.1,localhost,::1",
                "NO_COLOR": "1"})
    return env
