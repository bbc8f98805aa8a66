"""The installed Qwen Code runtime, and the isolated HOME both its tool replay and its continuation run in."""

from __future__ import annotations

import os
import re
from pathlib import Path

import orjson

from forkpoint.adapters.qwen_code.spec import VERSION
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.fs import refused_as, write_file_strict
from forkpoint.core.model import JsonObject
from forkpoint.process import sanitized_env
from forkpoint.sandbox import home_environment

#: the key the agent sends (the bridge and the tool host ignore it; the real upstream key never reaches the agent)
AGENT_KEY = "forkpoint-bridge"
PROXY_SINK = "http://127.0.0.1:9"  # nothing listens there: a background fetch fails at once
#: OpenAI-compatible auth; no update check, no usage statistics, no telemetry, and no managed auto-memory (measured:
#: after each answer 0.24.4 sends a memory-extraction request with its own system prompt and writes ~/.qwen)
SETTINGS: JsonObject = {
    "security": {"auth": {"selectedType": "openai"}},
    "general": {"enableAutoUpdate": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "memory": {"enableManagedAutoMemory": False, "enableAutoSkill": False},
}


def project_dir(cwd: str) -> str:
    """Qwen Code's folder name for a project (``sanitizeCwd``: every non-alphanumeric character becomes ``-``)."""
    return re.sub(r"[^a-zA-Z0-9]", "-", cwd)


def installed_entrypoint() -> Path:
    """The verified runtime's ``qwen`` (tool replay needs the CLI's own tools even without a continuation)."""
    from forkpoint.runtimes import find

    runtime = find("qwen-code", VERSION)
    if runtime is None:
        raise ReplayError(ErrorKind.CONFIGURATION, f"Qwen Code {VERSION} is not installed; run `forkpoint agents "
                                                   f"install qwen-code@{VERSION}` (its own tools re-run the calls)")
    return runtime.entrypoint


def write_settings(home: Path, kind: ErrorKind) -> None:
    """``~/.qwen/settings.json`` in the isolated HOME, which replayed tools can write: no planted link followed."""
    home.mkdir(parents=True, exist_ok=True)
    with refused_as(kind, f"write {home / '.qwen/settings.json'}"):
        write_file_strict(home, ".qwen/settings.json", orjson.dumps(SETTINGS))


def qwen_env(home: Path, base_url: str) -> dict[str, str]:
    """No credentials, the isolated HOME, the model at ``base_url`` (loopback, Chat Completions under ``/v1``),
    every proxy at a closed port."""
    env = home_environment(sanitized_env(os.environ, strip_credentials=True), home)
    for name in list(env):
        if name.startswith(("OPENAI_", "QWEN_", "DASHSCOPE_", "ANTHROPIC_", "GEMINI_", "GOOGLE_")) or \
                name.lower() in ("http_proxy", "https_proxy", "all_proxy"):
            del env[name]
    env.update({"OPENAI_API_KEY": AGENT_KEY, "OPENAI_BASE_URL": f"{base_url}/v1",
                "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1",
                "HTTP_PROXY": PROXY_SINK, "HTTPS_PROXY": PROXY_SINK, "http_proxy": PROXY_SINK,
                "https_proxy": PROXY_SINK, "NO_PROXY": "127.0.0.1,localhost,::1", "no_proxy": "127.0.0.1,localhost,::1",
                "NO_COLOR": "1"})
    return env
