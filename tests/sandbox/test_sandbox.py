"""Choosing a sandbox by name (sandbox/__init__.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.sandbox import open_sandbox


def test_unknown_sandbox_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ReplayError) as caught:
        open_sandbox("docker", tmp_path, None)
    assert caught.value.kind is ErrorKind.CONFIGURATION and "local, bwrap" in caught.value.message
