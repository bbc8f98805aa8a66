"""Example trajectories shipped with forkpoint: real recordings made with ScriptedModel (see tests/fixtures).

Each example folder holds ``session.jsonl`` (the native trajectory), ``workspace/`` (the workspace as it was
before the recording) and ``meta.json`` (version, recorded cwd).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_HERE = Path(__file__).parent
_FOLDERS = {"claude-code": "claude-code"}


def folder(agent: str) -> Path:
    return _HERE / _FOLDERS[agent]


def path(agent: str) -> Path:
    """The example trajectory of ``agent``."""
    return folder(agent) / "session.jsonl"


def meta(agent: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads((folder(agent) / "meta.json").read_text())
    return value
