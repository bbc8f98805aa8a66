"""Codex's apply_patch file effects (``tool_patch``): verify everything first, then apply in order, confined."""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.adapters.codex.tool_patch import ApplyPatch, join_path
from forkpoint.core.errors import ReplayError


def _patch(body: str) -> str:
    return f"*** Begin Patch\n{body}*** End Patch\n"


def test_a_patch_reports_its_exit_code_and_the_absolute_paths_it_changed(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("a\nb\n")
    result = ApplyPatch(tmp_path, True).run(_patch(
        "*** Add File: new/n.txt\n+n\n*** Update File: old.txt\n*** Move to: moved.txt\n@@\n-b\n+B\n"))
    assert result.exit_code == 0
    assert result.content.endswith("Output:\nSuccess. Updated the following files:\nA new/n.txt\nM moved.txt\n")
    assert result.changed == (f"{tmp_path}/new/n.txt", f"{tmp_path}/moved.txt", f"{tmp_path}/old.txt")
    assert (tmp_path / "moved.txt").read_text() == "a\nB\n" and not (tmp_path / "old.txt").exists()


def test_a_failed_verification_changes_nothing(tmp_path: Path) -> None:
    result = ApplyPatch(tmp_path, False).run(_patch("*** Add File: a.txt\n+a\n*** Delete File: missing.txt\n"))
    assert result.exit_code is None and result.changed == ()
    assert result.content.startswith("apply_patch verification failed: Failed to read ")
    assert list(tmp_path.iterdir()) == []


def test_paths_outside_the_root_are_refused_before_any_effect(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    with pytest.raises(ReplayError) as caught:
        ApplyPatch(root, True).run(_patch("*** Add File: in.txt\n+in\n*** Add File: ../out.txt\n+out\n"))
    assert caught.value.before_effect
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["ws"]


def test_paths_join_like_rust() -> None:
    assert join_path("/ws", "a.txt") == "/ws/a.txt"
    assert join_path("/ws/", "a.txt") == "/ws/a.txt"
    assert join_path("/ws", "/abs.txt") == "/abs.txt"
