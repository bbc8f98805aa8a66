"""The installed Copilot CLI runtime, and the environment its tool replay runs in.

Measured on 1.0.102 (``copilot help environment``, docs/adapters/copilot-cli.md): ``COPILOT_PROVIDER_BASE_URL``
points the model traffic at a custom (BYOK) provider — type ``openai``, wire API ``completions`` by default: Chat
Completions at ``<base>/chat/completions`` — and then "GitHub authentication is not required";
``COPILOT_OFFLINE=true`` skips every other network access (GitHub auth, telemetry, web tools, the GitHub MCP
server, auto-update). The binary unpacks its 235 MB package into ``COPILOT_PKG_CACHE_HOME`` (default
``~/.cache/copilot/pkg``) on first start: forkpoint keeps that cache beside the runtime, so a run's isolated HOME
does not get a copy per run.
"""

from __future__ import annotations

import os
from pathlib import Path

from forkpoint.adapters.copilot_cli.spec import VERSION
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process import sanitized_env
from forkpoint.sandbox import home_environment

#: the key the agent sends (the bridge and the tool host ignore it; no real key ever reaches the agent)
AGENT_KEY = "forkpoint-bridge"
PROXY_SINK = "http://127.0.0.1:9"  # nothing listens there: a stray fetch fails at once
#: the package cache's folder name beside the runtime's native binary
PKG_CACHE = ".forkpoint-copilot-pkg"


def installed_entrypoint() -> Path:
    """The verified runtime's ``copilot`` (tool replay needs the CLI's own tools even without a continuation)."""
    from forkpoint.runtimes import find

    runtime = find("copilot-cli", VERSION)
    if runtime is None:
        raise ReplayError(ErrorKind.CONFIGURATION, f"GitHub Copilot CLI {VERSION} is not installed; run `forkpoint "
                                                   f"agents install copilot-cli@{VERSION}` (its own tools re-run "
                                                   "the calls)")
    return runtime.entrypoint


#: options every run passes that another setting of the run also gives (``COPILOT_OFFLINE=true``: no telemetry, no
#: GitHub MCP server, no update; ``COPILOT_AUTO_UPDATE=false``): a release without one (1.0.82 has no
#: ``--disable-client-telemetry`` and exits 1 on it) runs without it
REDUNDANT_OPTIONS = ("--no-auto-update", "--disable-client-telemetry", "--disable-builtin-mcps")


def redundant_options(entrypoint: Path) -> list[str]:
    """:data:`REDUNDANT_OPTIONS` the binary at ``entrypoint`` accepts: all of them for the verified runtime (no
    process); for another release (a calibration's probe or trial) those its own ``--help`` lists
    (kit.cli_options.offered_options)."""
    from forkpoint.adapters.kit.cli_options import offered_options

    env = (("COPILOT_AUTO_UPDATE", "false"), ("COPILOT_OFFLINE", "true"), ("NO_COLOR", "1"),
           ("COPILOT_PKG_CACHE_HOME", str(pkg_cache(entrypoint))))
    return offered_options("copilot-cli", (VERSION,), entrypoint, REDUNDANT_OPTIONS, ("--help",), "--allow-all", env)


def pkg_cache(entrypoint: Path) -> Path:
    return entrypoint.resolve().parent / PKG_CACHE


def copilot_env(home: Path, base_url: str, model: str, entrypoint: Path) -> dict[str, str]:
    """No credentials, the isolated HOME, the model at ``base_url`` (loopback, BYOK, offline), every proxy at a
    closed port, no V8 compile cache (the binary is a Node single executable: it would write one into TMPDIR)."""
    env = home_environment(sanitized_env(os.environ, strip_credentials=True), home)
    for name in list(env):
        if (name.startswith(("COPILOT_", "GH_", "GITHUB_", "OTEL_"))
                or name.lower() in ("http_proxy", "https_proxy", "all_proxy")):
            del env[name]
    env.update({"COPILOT_PROVIDER_BASE_URL": base_url, "COPILOT_PROVIDER_TYPE": "openai",
                "COPILOT_PROVIDER_API_KEY": AGENT_KEY, "COPILOT_MODEL": model, "COPILOT_OFFLINE": "true",
                "COPILOT_AUTO_UPDATE": "false", "COPILOT_HOME": str(home / ".copilot"),
                "COPILOT_PKG_CACHE_HOME": str(pkg_cache(entrypoint)),
                "HTTP_PROXY": PROXY_SINK, "HTTPS_PROXY": PROXY_SINK, "http_proxy": PROXY_SINK,
                "https_proxy": PROXY_SINK, "NO_PROXY": "127.0.0.1,localhost,::1", "no_proxy": "127.0.0.1,localhost,::1",
                "NO_COLOR": "1", "NODE_DISABLE_COMPILE_CACHE": "1"})
    return env
