"""Real-file tests for confined access: symlinks, special files, escapes, substitution races, budgets."""

from __future__ import annotations

import errno
import os
import shutil
import socket
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpoint.core.fs import (
    ConfinementError,
    InputChangedError,
    InputTooLargeError,
    NotRegularFileError,
    PlantedLinkError,
    copy_fd_strict,
    is_blank,
    lstat_strict,
    make_dirs_strict,
    open_confined,
    read_bounded_input,
    read_file_strict,
    read_regular_file,
    split_line_views,
    split_lines,
    write_file_confined,
    write_file_strict,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux dir-fd walk")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_bytes(b"hello\n")
    (ws / "sub").mkdir()
    (ws / "sub" / "b.txt").write_bytes(b"bee\n")
    return ws


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_bytes(b"SECRET\n")
    return out


def _read(root: Path, path: str | Path, max_bytes: int = 1024) -> bytes:
    return read_regular_file(root, path, max_bytes=max_bytes).data


# --------------------------------------------------------------------------------------------- reads


def test_reads_a_regular_file(root: Path) -> None:
    result = read_regular_file(root, "a.txt", max_bytes=100)
    assert (result.data, result.truncated, result.size) == (b"hello\n", False, 6)
    assert _read(root, "sub/b.txt") == b"bee\n"
    assert _read(root, "./sub//./b.txt") == b"bee\n"
    assert _read(root, root / "sub" / "b.txt") == b"bee\n"


def test_truncation_is_flagged_at_the_byte_budget(root: Path) -> None:
    exact = read_regular_file(root, "a.txt", max_bytes=6)
    assert (exact.data, exact.truncated) == (b"hello\n", False)
    cut = read_regular_file(root, "a.txt", max_bytes=5)
    assert (cut.data, cut.truncated, cut.size) == (b"hello", True, 6)


def test_missing_file_raises_with_the_callers_path(root: Path) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        _read(root, "sub/missing.txt")
    assert caught.value.filename == "sub/missing.txt"


def test_directory_is_not_a_regular_file(root: Path) -> None:
    for path in ("sub", ".", "sub/..", ""):
        with pytest.raises(NotRegularFileError, match="regular file"):
            _read(root, path)


def test_fifo_without_writer_is_refused_without_blocking(root: Path) -> None:
    os.mkfifo(root / "pipe")
    started = time.monotonic()
    with pytest.raises(NotRegularFileError, match="regular file"):
        _read(root, "pipe")
    # The raw open does not block either (O_NONBLOCK), and reads would be refused by the fstat check.
    fd = open_confined(root, "pipe", os.O_RDONLY)
    try:
        assert stat.S_ISFIFO(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
    assert time.monotonic() - started < 1


def test_symlink_to_dev_zero_is_outside(root: Path) -> None:
    os.symlink("/dev/zero", root / "zero")
    with pytest.raises(ConfinementError):
        _read(root, "zero")


def test_device_node_is_not_a_regular_file(root: Path) -> None:
    try:
        os.mknod(root / "null", stat.S_IFCHR | 0o666, os.makedev(1, 3))
    except (PermissionError, OSError):
        pytest.skip("cannot create device nodes here")
    with pytest.raises(NotRegularFileError, match="regular file"):
        _read(root, "null")


def test_socket_is_not_a_regular_file() -> None:
    short = Path(tempfile.mkdtemp(prefix="fp", dir="/tmp"))  # AF_UNIX paths are limited to 108 bytes
    try:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(short / "s"))
        try:
            with pytest.raises(NotRegularFileError, match="regular file"):
                _read(short, "s")
        finally:
            server.close()
    finally:
        shutil.rmtree(short)


def test_large_sparse_file_reads_only_the_budget(root: Path) -> None:
    with open(root / "sparse", "wb") as handle:
        handle.write(b"prefix")
        handle.truncate(1024 * 1024 * 1024)
    started = time.monotonic()
    result = read_regular_file(root, "sparse", max_bytes=32)
    assert time.monotonic() - started < 1
    assert len(result.data) == 32 and result.data.startswith(b"prefix")
    assert result.truncated and result.size == 1024 * 1024 * 1024


# --------------------------------------------------------------------------------------------- symlinks


def test_symlinks_inside_the_root_are_followed(root: Path) -> None:
    os.symlink("a.txt", root / "rel")
    os.symlink(root / "a.txt", root / "abs")
    os.symlink("sub", root / "dirlink")
    os.symlink("../a.txt", root / "sub" / "up")
    os.symlink("rel", root / "chain")
    assert _read(root, "rel") == b"hello\n"
    assert _read(root, "abs") == b"hello\n"
    assert _read(root, "dirlink/b.txt") == b"bee\n"
    assert _read(root, "sub/up") == b"hello\n"
    assert _read(root, "chain") == b"hello\n"
    # `..` after a symlinked directory is taken from the target, as the kernel would.
    os.makedirs(root / "deep" / "x")
    (root / "deep" / "y.txt").write_bytes(b"why\n")
    os.symlink("deep/x", root / "dx")
    assert _read(root, "dx/../y.txt") == b"why\n"


def test_symlink_target_through_the_real_root_path(tmp_path: Path, root: Path) -> None:
    os.symlink(root, tmp_path / "alias")
    os.symlink(root / "a.txt", root / "real-abs")
    assert _read(tmp_path / "alias", "real-abs") == b"hello\n"
    assert _read(tmp_path / "alias", root / "a.txt") == b"hello\n"


def test_symlinks_leading_outside_are_refused(root: Path, outside: Path) -> None:
    os.symlink(outside / "secret.txt", root / "leak")
    os.symlink(outside, root / "leakdir")
    os.symlink("../outside/secret.txt", root / "relleak")
    os.symlink("../../outside", root / "sub" / "relleakdir")
    for path in ("leak", "leakdir/secret.txt", "relleak", "sub/relleakdir/secret.txt"):
        with pytest.raises(ConfinementError):
            _read(root, path)


def test_symlink_loop_is_an_eloop(root: Path) -> None:
    os.symlink("loop2", root / "loop1")
    os.symlink("loop1", root / "loop2")
    with pytest.raises(OSError) as caught:
        _read(root, "loop1")
    assert caught.value.errno == errno.ELOOP


def test_final_symlink_can_be_refused(root: Path) -> None:
    os.symlink("a.txt", root / "rel")
    with pytest.raises(OSError) as caught:
        open_confined(root, "rel", os.O_RDONLY, follow_final_symlink_inside=False)
    assert caught.value.errno == errno.ELOOP
    fd = open_confined(root, "rel", os.O_RDONLY)
    try:
        assert os.read(fd, 100) == b"hello\n"
    finally:
        os.close(fd)


def test_directory_fd_can_be_opened(root: Path) -> None:
    os.symlink("sub", root / "dirlink")
    fd = open_confined(root, "dirlink", os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert "b.txt" in os.listdir(fd)
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------- escapes


def test_absolute_paths_must_lie_under_the_root(root: Path, outside: Path) -> None:
    with pytest.raises(ConfinementError):
        _read(root, outside / "secret.txt")
    with pytest.raises(ConfinementError):
        _read(root, "/etc/passwd")
    with pytest.raises(ConfinementError):
        _read(root, f"{root}/../outside/secret.txt")
    with pytest.raises(ConfinementError):
        _read(root, f"{root}-sibling/x")  # a shared string prefix is not containment
    assert _read(root, f"{root}/sub/../a.txt") == b"hello\n"


def test_dotdot_may_not_climb_above_the_root(root: Path, outside: Path) -> None:
    assert _read(root, "sub/../a.txt") == b"hello\n"
    for path in ("../outside/secret.txt", "sub/../../outside/secret.txt", ".."):
        with pytest.raises(ConfinementError):
            _read(root, path)


def test_substitution_after_resolution_is_refused(root: Path, outside: Path) -> None:
    (root / "sub" / "secret.txt").write_bytes(b"inside\n")
    assert _read(root, "sub/secret.txt") == b"inside\n"
    # Replace the parent directory with a symlink to outside between two calls.
    os.rename(root / "sub", root / "sub.moved")
    os.symlink(outside, root / "sub")
    with pytest.raises(ConfinementError):
        _read(root, "sub/secret.txt")
    # Replace the file itself with a symlink to outside.
    os.unlink(root / "sub")
    os.rename(root / "sub.moved", root / "sub")
    os.unlink(root / "sub" / "secret.txt")
    os.symlink(outside / "secret.txt", root / "sub" / "secret.txt")
    with pytest.raises(ConfinementError):
        _read(root, "sub/secret.txt")


def test_component_flipping_race_never_reads_outside(root: Path, outside: Path) -> None:
    (root / "d").mkdir()
    (root / "d" / "secret.txt").write_bytes(b"inside\n")
    stop = threading.Event()
    flips = 0

    def flipper() -> None:
        nonlocal flips
        try:
            for i in range(2000):
                if i % 2 == 0:
                    os.rename(root / "d", root / "d.real")
                    os.symlink(outside, root / "d")
                else:
                    os.unlink(root / "d")
                    os.rename(root / "d.real", root / "d")
                flips += 1
        finally:
            stop.set()

    thread = threading.Thread(target=flipper)
    thread.start()
    inside = leaked = refused = 0
    try:
        while not stop.is_set():
            for path in ("d/secret.txt", f"{root}/d/secret.txt", "d/../d/secret.txt"):
                try:
                    data = _read(root, path)
                except (ConfinementError, OSError):
                    refused += 1
                    continue
                if data == b"SECRET\n":
                    leaked += 1
                else:
                    assert data == b"inside\n"
                    inside += 1
    finally:
        thread.join()
    assert flips == 2000
    assert leaked == 0
    assert inside > 0 and refused > 0, (inside, refused)  # both outcomes were exercised


# --------------------------------------------------------------------------------------------- writes


def test_write_creates_and_replaces(root: Path) -> None:
    write_file_confined(root, "new.txt", b"one")
    assert (root / "new.txt").read_bytes() == b"one"
    (root / "a.txt").chmod(0o640)
    write_file_confined(root, "a.txt", b"two")
    assert (root / "a.txt").read_bytes() == b"two"
    assert stat.S_IMODE((root / "a.txt").stat().st_mode) == 0o640
    assert not [p for p in root.iterdir() if p.name.startswith(".forkpoint-")]


def test_write_creates_parents_only_when_asked(root: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_file_confined(root, "x/y/z.txt", b"z")
    write_file_confined(root, "x/y/z.txt", b"z", create_parents=True)
    assert (root / "x" / "y" / "z.txt").read_bytes() == b"z"


def test_write_through_inside_symlink_writes_the_target(root: Path) -> None:
    os.symlink("sub/b.txt", root / "link")
    write_file_confined(root, "link", b"via link")
    assert (root / "sub" / "b.txt").read_bytes() == b"via link"
    assert (root / "link").is_symlink()
    os.symlink("sub/fresh.txt", root / "dangling")
    write_file_confined(root, "dangling", b"fresh")
    assert (root / "sub" / "fresh.txt").read_bytes() == b"fresh"


def test_write_through_outside_symlink_is_refused(root: Path, outside: Path) -> None:
    os.symlink(outside / "secret.txt", root / "leak")
    os.symlink(outside / "new.txt", root / "leak-new")
    os.symlink(outside, root / "leakdir")
    for path in ("leak", "leak-new", "leakdir/secret.txt", "leakdir/x/y.txt", "../outside/secret.txt"):
        with pytest.raises(ConfinementError):
            write_file_confined(root, path, b"pwned", create_parents=True)
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]
    assert (outside / "secret.txt").read_bytes() == b"SECRET\n"


def test_write_replaces_a_hard_link_instead_of_writing_through(root: Path, outside: Path) -> None:
    try:
        os.link(outside / "secret.txt", root / "hard")
    except OSError:
        pytest.skip("hard links not permitted here")
    write_file_confined(root, "hard", b"mine")
    assert (root / "hard").read_bytes() == b"mine"
    assert (outside / "secret.txt").read_bytes() == b"SECRET\n"


def test_write_refuses_directories_and_special_files(root: Path) -> None:
    os.mkfifo(root / "pipe")
    with pytest.raises(IsADirectoryError):
        write_file_confined(root, "sub", b"x")
    with pytest.raises(IsADirectoryError):
        write_file_confined(root, "sub/..", b"x")
    with pytest.raises(NotRegularFileError):
        write_file_confined(root, "pipe", b"x")


# --------------------------------------------------------------------------------------------- own inputs


@pytest.fixture
def inputs(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "inputs"
    folder.mkdir()
    yield folder


def test_bounded_input_reads_regular_files_and_follows_user_symlinks(inputs: Path) -> None:
    (inputs / "t.jsonl").write_bytes(b"{}\n")
    os.symlink(inputs / "t.jsonl", inputs / "link.jsonl")
    assert read_bounded_input(inputs / "t.jsonl") == b"{}\n"
    assert read_bounded_input(inputs / "link.jsonl") == b"{}\n"


def test_bounded_input_refuses_special_and_oversized_files(inputs: Path) -> None:
    os.mkfifo(inputs / "fifo")
    started = time.monotonic()
    for path in (inputs, inputs / "fifo"):
        with pytest.raises(NotRegularFileError, match="regular file"):
            read_bounded_input(path)
    assert time.monotonic() - started < 1
    with open(inputs / "big", "wb") as handle:
        handle.truncate(257)
    with pytest.raises(InputTooLargeError):
        read_bounded_input(inputs / "big", max_bytes=256)
    assert len(read_bounded_input(inputs / "big", max_bytes=257)) == 257
    assert issubclass(InputChangedError, Exception)


def test_aliases_name_the_root_too(tmp_path: Path) -> None:
    """A sandbox mounts the workspace at the recorded cwd: that spelling (and symlinks to it) stays inside."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "a.txt").write_bytes(b"alias\n")
    os.symlink("/recorded/cwd/a.txt", root / "link")
    alias = ("/recorded/cwd",)
    assert read_regular_file(root, "/recorded/cwd/a.txt", max_bytes=100, aliases=alias).data == b"alias\n"
    assert read_regular_file(root, "/recorded/cwd/link", max_bytes=100, aliases=alias).data == b"alias\n"
    write_file_confined(root, "/recorded/cwd/sub/b.txt", b"b", create_parents=True, aliases=alias)
    assert (root / "sub" / "b.txt").read_bytes() == b"b"
    with pytest.raises(ConfinementError):
        read_regular_file(root, "/recorded/cwd/link", max_bytes=100)  # without the alias: outside
    with pytest.raises(ConfinementError):
        read_regular_file(root, "/recorded/other/a.txt", max_bytes=100, aliases=alias)


def test_split_lines_numbers_offsets_and_keeps_terminators() -> None:
    assert list(split_lines(b'{"a":1}\n\r\n{"b":2}')) == [(1, 0, b'{"a":1}\n'), (2, 8, b"\r\n"), (3, 10, b'{"b":2}')]
    assert list(split_lines(b"")) == []


def test_split_line_views_are_the_lines_without_terminators_and_copy_nothing() -> None:
    source = b'{"a":1}\n\r\n{"b":2}'
    views = list(split_line_views(source))
    assert [(n, o, bytes(v), t) for n, o, v, t in views] == [(1, 0, b'{"a":1}', True), (2, 8, b"\r", True),
                                                           (3, 10, b'{"b":2}', False)]
    assert all(view.obj is source for _n, _o, view, _t in views)  # views into the buffer, not copies
    assert [bytes(v) for _n, _o, v, _t in split_line_views(b"x\n\n")] == [b"x", b""]
    assert [is_blank(v) for _n, _o, v, _t in views] == [False, True, False]
    assert is_blank(b"") and is_blank(b" \t\x0b\x0c") and not is_blank(b" x ")


# ------------------------------------------------------------------- strict helpers (sandbox-writable folders)


def _planted(root: Path, outside: Path) -> None:
    """What a replayed command can plant: links to a host file and folder, /dev/zero, a FIFO."""
    (root / "host-file").symlink_to(outside / "secret.txt")
    (root / "host-dir").symlink_to(outside)
    (root / "zero").symlink_to("/dev/zero")
    (root / "inside").symlink_to("a.txt")  # even a link to a sibling: forkpoint never plants one
    os.mkfifo(root / "fifo")


def test_strict_read_refuses_every_link_and_special_file_fast(root: Path, outside: Path) -> None:
    _planted(root, outside)
    assert read_file_strict(root, "sub/b.txt") == b"bee\n"
    for name in ("host-file", "zero", "inside", "host-dir/secret.txt"):
        with pytest.raises(PlantedLinkError, match="symbolic link; not followed"):
            read_file_strict(root, name)
    started = time.monotonic()
    with pytest.raises(NotRegularFileError):
        read_file_strict(root, "fifo")
    with pytest.raises(NotRegularFileError):
        read_file_strict(root, "sub")
    assert time.monotonic() - started < 2
    with pytest.raises(FileNotFoundError):
        read_file_strict(root, "missing")


def test_strict_read_is_bounded(root: Path) -> None:
    with open(root / "big", "wb") as handle:
        handle.truncate(64 * 1024 * 1024)  # sparse
    with pytest.raises(InputTooLargeError):
        read_file_strict(root, "big", max_bytes=1024)
    assert read_file_strict(root, "a.txt", max_bytes=6) == b"hello\n"


def test_strict_root_may_not_be_a_link(tmp_path: Path, root: Path) -> None:
    (tmp_path / "alias").symlink_to(root)
    with pytest.raises(PlantedLinkError):
        read_file_strict(tmp_path / "alias", "a.txt")


def test_strict_write_and_mkdir_never_follow(root: Path, outside: Path) -> None:
    _planted(root, outside)
    before = sorted(p.name for p in outside.iterdir())
    write_file_strict(root, "new/deeper/file.txt", b"data")
    assert (root / "new" / "deeper" / "file.txt").read_bytes() == b"data"
    assert stat.S_IMODE((root / "new" / "deeper" / "file.txt").stat().st_mode) == 0o600
    for name in ("host-dir/x.txt", "host-dir/sub/x.txt", "host-file", "inside"):
        with pytest.raises(PlantedLinkError):
            write_file_strict(root, name, b"attacker")
    with pytest.raises(NotRegularFileError):
        write_file_strict(root, "fifo", b"x")
    with pytest.raises(PlantedLinkError):
        make_dirs_strict(root, "host-dir/made")
    make_dirs_strict(root, "sub/made/again")
    assert (root / "sub" / "made" / "again").is_dir()
    assert sorted(p.name for p in outside.iterdir()) == before
    assert (outside / "secret.txt").read_bytes() == b"SECRET\n"
    assert (root / "host-file").is_symlink() and (root / "inside").is_symlink()


def test_strict_lstat_and_copy(root: Path, outside: Path) -> None:
    _planted(root, outside)
    st = lstat_strict(root, "zero")
    assert st is not None and stat.S_ISLNK(st.st_mode)
    assert lstat_strict(root, "missing") is None
    with pytest.raises(PlantedLinkError):
        lstat_strict(root, "host-dir/secret.txt")
    fd = os.open(root / "a.txt", os.O_RDONLY)
    try:
        assert copy_fd_strict(fd, root, "copies/a.txt", max_bytes=3) == 3
    finally:
        os.close(fd)
    assert (root / "copies" / "a.txt").read_bytes() == b"hel"
    with pytest.raises(PlantedLinkError):
        copy_fd_strict(0, root, "host-dir/c.txt", max_bytes=3)
