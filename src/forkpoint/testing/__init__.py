"""Test helpers: ScriptedModel (a scripted model server for every bridge protocol) and session builders.

Exports are loaded lazily so ``python -m forkpoint.testing.scripted_model`` runs cleanly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forkpoint.testing.scripted_model import ScriptedModel, Turn, stable_id, text, thinking, tool_use

__all__ = ["ScriptedModel", "Turn", "stable_id", "text", "thinking", "tool_use"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from forkpoint.testing import scripted_model

        return getattr(scripted_model, name)
    raise AttributeError(f"module 'forkpoint.testing' has no attribute {name!r}")
