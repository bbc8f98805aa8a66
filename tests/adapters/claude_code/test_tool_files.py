"""What Claude Code's file tools share (``tool_files``): confinement of every path before any effect."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import FreshObservation

OLD, NEW = "2.1.220", "2.1.332"
BOTH = pytest.mark.parametrize("version", [OLD, NEW])

Run = Callable[..., FreshObservation]  # the conftest's ``make(version)`` gives one


def test_paths_outside_the_workspace_are_refused_before_any_effect(
    make: Callable[[str], Run], workspace: Path, tmp_path: Path
) -> None:
    run = make(OLD)
    (tmp_path / "outside.txt").write_text("x\n")  # (a Read of an absent path outside answers "does not exist")
    for name, arguments in (
        ("Read", {"file_path": "/etc/hostname"}),
        ("Read", {"file_path": "../outside.txt"}),
        ("Write", {"file_path": str(tmp_path / "new.txt"), "content": "x"}),
        ("Edit", {"file_path": "~/x.txt", "old_string": "", "new_string": "x"}),
    ):
        with pytest.raises(ReplayError) as error:
            run(name, **arguments)
        assert error.value.kind is ErrorKind.EXECUTOR and error.value.before_effect
    assert not (tmp_path / "new.txt").exists()
