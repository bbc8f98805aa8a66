"""The boundary snapshot's one-pass copy + inventory: the same inventory as ``cp -a`` then ``inventory`` (the
two-pass method it replaced), the same tree, and never a planted link followed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from forkpoint.branches.branching import checked_snapshot, take_snapshot
from forkpoint.branches.tree_copy import copy_with_entries
from forkpoint.core.errors import ReplayError
from forkpoint.workspace import copy_tree, inventory, tree_entries


def _hostile_tree(root: Path, outside: Path) -> Path:
    tree = root / "tree"
    (tree / "empty" / "deeper").mkdir(parents=True)
    (tree / "src").mkdir()
    (tree / "src" / "tool.sh").write_bytes(b"#!/bin/sh\necho hi\n")
    (tree / "src" / "tool.sh").chmod(0o750)
    (tree / "src" / "big.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    (tree / "src" / "empty.txt").write_bytes(b"")
    (tree / "readonly.txt").write_bytes(b"read only")
    (tree / "readonly.txt").chmod(0o444)
    os.link(tree / "src" / "tool.sh", tree / "empty" / "hardlink.sh")
    (tree / "to-outside").symlink_to(outside)  # planted: never followed
    (tree / "dangling").symlink_to("no/such/file")
    (tree / "src" / "to-sibling").symlink_to("../readonly.txt")
    (tree / os.fsdecode(b"not-utf8-\xff")).write_bytes(b"bytes")
    os.mkfifo(tree / "pipe")
    (tree / "private").mkdir(mode=0o700)
    os.utime(tree / "src" / "empty.txt", ns=(1_000_000_000, 2_000_000_000))
    return tree


def test_one_pass_inventory_equals_the_two_pass_method(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"secret")
    tree = _hostile_tree(tmp_path, outside)
    old = tmp_path / "old"
    old.mkdir()
    copy_tree(tree, old)
    new = tmp_path / "new"
    new.mkdir()
    entries = copy_with_entries(tree, new)

    assert entries == tree_entries(new) == tree_entries(old)
    assert inventory(new).sha256 == inventory(old).sha256 == inventory(tree).sha256
    for relative, _ in entries:  # modes (all bits), times and kinds as cp -a left them
        path = os.fsdecode(relative)
        mine, theirs = os.lstat(new / path), os.lstat(old / path)
        assert (stat.S_IFMT(mine.st_mode), stat.S_IMODE(mine.st_mode)) == \
            (stat.S_IFMT(theirs.st_mode), stat.S_IMODE(theirs.st_mode)), path
        if not stat.S_ISDIR(mine.st_mode):
            assert mine.st_mtime_ns == theirs.st_mtime_ns, path
    assert os.lstat(new / "src" / "tool.sh").st_ino == os.lstat(new / "empty" / "hardlink.sh").st_ino
    assert os.readlink(new / "to-outside") == str(outside)
    assert outside.read_bytes() == b"secret"


def test_take_snapshot_records_the_inventory_checked_snapshot_verifies(tmp_path: Path) -> None:
    tree = _hostile_tree(tmp_path, tmp_path / "absent")
    state = tmp_path / "state"
    description = take_snapshot(tree, state, tmp_path, "r")
    assert description["inventory_sha256"] == inventory(tree).sha256
    assert checked_snapshot(state, description["inventory_sha256"]) == state / "snapshot" / "workspace"
    (state / "snapshot" / "workspace" / "src" / "empty.txt").write_bytes(b"tampered")
    with pytest.raises(ReplayError, match="changed since the replay"):
        checked_snapshot(state, description["inventory_sha256"])


def test_a_folder_swapped_for_a_link_is_never_walked(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_bytes(b"secret")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "inner").symlink_to(outside, target_is_directory=True)
    target = tmp_path / "copy"
    target.mkdir()
    entries = copy_with_entries(tree, target)
    assert entries == [(b"inner", {"type": "symlink", "target": str(outside)})]
    assert (target / "inner").is_symlink()
    assert sorted(os.listdir(target)) == ["inner"]
