"""The installed Qwen Code runtime, and the isolated HOME both its tool replay and its continuation run in."""

from __future__ import annotations

import re
from pathlib import Path

from forkpoint.adapters.kit import npm_cli
from forkpoint.adapters.kit.npm_cli import AGENT_KEY, NodeStart
from forkpoint.adapters.qwen_code.spec import VERSION
from forkpoint.core.errors import ErrorKind
from forkpoint.core.model import JsonObject

#: OpenAI-compatible auth; no update check, no usage statistics, no telemetry, and no managed auto-memory (measured:
#: after each answer 0.24.4 sends a memory-extraction request with its own system prompt and writes ~/.qwen)
SETTINGS: JsonObject = {
    "security": {"auth": {"selectedType": "openai"}},
    "general": {"enableAutoUpdate": False},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "memory": {"enableManagedAutoMemory": False, "enableAutoSkill": False},
}


#: in an image root: ``cli.js`` with ``--expose-gc``, as the ``qwen`` bin wrapper spawns it, and no relaunch for more
#: heap (its ``--max-old-space-size``, half the memory, given up front)
NODE_START = NodeStart("QWEN_CODE_NO_RELAUNCH", ("--expose-gc",), "cli.js")


def project_dir(cwd: str) -> str:
    """Qwen Code's folder name for a project (``sanitizeCwd``: every non-alphanumeric character becomes ``-``)."""
    return re.sub(r"[^a-zA-Z0-9]", "-", cwd)


def installed_entrypoint() -> Path:
    """The verified runtime's ``qwen`` (tool replay needs the CLI's own tools even without a continuation)."""
    return npm_cli.installed_entrypoint("qwen-code", VERSION, "Qwen Code")


def write_settings(home: Path, kind: ErrorKind) -> None:
    """``~/.qwen/settings.json`` in the isolated HOME, which replayed tools can write: no planted link followed."""
    npm_cli.write_settings(home, ".qwen/settings.json", SETTINGS, kind)


def qwen_env(home: Path, base_url: str) -> dict[str, str]:
    """No credentials (nor any provider's key or URL variable), the isolated HOME, the model at ``base_url``
    (loopback, Chat Completions under ``/v1``), every proxy at a closed port."""
    return npm_cli.isolated_env(home, ("OPENAI_", "QWEN_", "DASHSCOPE_", "ANTHROPIC_", "GEMINI_", "GOOGLE_"),
                                {"OPENAI_API_KEY": AGENT_KEY, "OPENAI_BASE_URL": f"{base_url}/v1",
                                 "QWEN_CODE_SUPPRESS_YOLO_WARNING": "1"})
