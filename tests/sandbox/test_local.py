"""The local sandbox: where it refuses a workspace away from the recorded cwd, and what --path-map lets it accept."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.sandbox import open_sandbox


def test_local_refuses_a_workspace_elsewhere_with_both_ways_out(tmp_path: Path) -> None:
    with pytest.raises(ReplayError) as caught:
        open_sandbox("local", tmp_path, "/tmp/forkpoint-rec/single_bash")
    message = caught.value.message
    assert caught.value.kind is ErrorKind.WORKSPACE
    assert "recorded in /tmp/forkpoint-rec/single_bash" in message
    assert "--sandbox bwrap" in message
    assert f"--path-map /tmp/forkpoint-rec/single_bash={tmp_path}" in message


def test_local_refuses_a_path_map_that_misses_the_workspace(tmp_path: Path) -> None:
    with pytest.raises(ReplayError) as caught:
        open_sandbox("local", tmp_path, "/rec/app", ["/rec=/somewhere/else"])
    assert caught.value.kind is ErrorKind.WORKSPACE
    assert "maps the recorded cwd /rec/app to /somewhere/else/app" in caught.value.message


def test_local_accepts_the_recorded_path_and_a_parent_mapping(tmp_path: Path) -> None:
    (tmp_path / "app").mkdir()
    assert open_sandbox("local", tmp_path / "app", str(tmp_path / "app")).cwd == str(tmp_path / "app")
    mapped = open_sandbox("local", tmp_path / "app", "/rec/app", [f"/rec={tmp_path}"])
    assert mapped.path_map.map_path("/rec/app/x") == str(tmp_path / "app" / "x")
