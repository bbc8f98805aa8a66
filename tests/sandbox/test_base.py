"""--path-map (sandbox/base.py): parsing, the whole-path matching rule, input rewrites and output restores (pure)."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.sandbox import open_sandbox
from forkpoint.sandbox.base import PathMap, restore_paths, rewrite_arguments
from forkpoint.sandbox.local import LocalSandbox


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("relative=/x", "absolute"),
        ("/a", "OLD=NEW"),
        ("/a=", "OLD=NEW"),
        ("/=/x", "root"),
        ("/a=/a/", "itself"),
    ],
)
def test_bad_entries_are_refused(spec: str, words: str) -> None:
    with pytest.raises(ReplayError) as caught:
        PathMap.parse([spec])
    assert caught.value.kind is ErrorKind.CONFIGURATION and words in caught.value.message


def test_duplicate_old_prefix_is_refused() -> None:
    with pytest.raises(ReplayError, match="twice"):
        PathMap.parse(["/a=/x", "/a/=/y"])


@pytest.mark.parametrize(
    ("text", "expected", "count"),
    [
        ("/rec/a.txt", "/real/ws/a.txt", 1),
        ("cd /rec && ls /rec/", "cd /real/ws && ls /real/ws/", 2),
        ("the directory is /rec.", "the directory is /real/ws.", 1),
        ("'/rec' \"/rec\" x=/rec:/rec/b", "'/real/ws' \"/real/ws\" x=/real/ws:/real/ws/b", 4),
        ("/home/rec /rec-2 /rec.txt /recx /rec_a //rec", "/home/rec /rec-2 /rec.txt /recx /rec_a //rec", 0),
    ],
)
def test_only_whole_paths_are_rewritten(text: str, expected: str, count: int) -> None:
    mapping = PathMap.parse(["/rec=/real/ws"])
    assert mapping.to_real(text) == (expected, count)
    assert mapping.to_recorded(expected)[0] == text


def test_longest_prefix_first_and_never_twice() -> None:
    mapping = PathMap.parse(["/rec=/rec/inner", "/rec/deep=/elsewhere"])
    assert mapping.to_real("/rec/deep/x /rec/y") == ("/elsewhere/x /rec/inner/y", 2)


def test_rewrites_and_restores_are_logged(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sandbox = open_sandbox("local", workspace, "/rec", [f"/rec={workspace}"])
    arguments = {"command": "cat /rec/a /rec/b", "description": "no path", "nested": {"list": ["/rec/c"]}}
    rewritten = rewrite_arguments(sandbox, "call-1", arguments)
    assert rewritten == {"command": f"cat {workspace}/a {workspace}/b", "description": "no path",
                         "nested": {"list": [f"{workspace}/c"]}}
    assert arguments["command"] == "cat /rec/a /rec/b"  # the call itself (and the native prefix) keep the text
    assert sandbox.path_rewrites == [{"call_id": "call-1", "field": "command", "count": 2},
                                     {"call_id": "call-1", "field": "nested", "count": 1}]
    restored = restore_paths(sandbox, "call-1", "native", {"filePath": f"{workspace}/a", "n": 3})
    assert restored == {"filePath": "/rec/a", "n": 3}
    assert sandbox.path_restores == [{"call_id": "call-1", "where": "native", "count": 1}]


def test_no_map_no_change(tmp_path: Path) -> None:
    sandbox = LocalSandbox(tmp_path)
    arguments = {"command": f"ls {tmp_path}"}
    assert rewrite_arguments(sandbox, "c", arguments) is arguments
    assert restore_paths(sandbox, "c", "content", str(tmp_path)) == str(tmp_path)
    assert sandbox.path_rewrites == [] and sandbox.path_restores == []
