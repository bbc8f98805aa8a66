"""Copy a workspace tree and take its inventory in one pass (the boundary snapshot: ``cp -a`` + ``inventory``).

Each regular file is read once: every chunk is written to the copy and hashed (on a helper thread, so the hash
costs little wall time next to the copy on a machine with a second core); a FICLONE reflink is tried first where
the file system has them, and then the clone is read once for its hash. The entries are the ones
:func:`forkpoint.workspace.tree_entries` gives for the copy (same hash format): the bytes hashed are exactly the
bytes written.

Like ``cp -a``: modes, times, hard links inside the tree, symlinks (copied as links, never followed), fifos and
sockets (recreated, never opened), device nodes (``mknod``: refused without the privilege, as ``cp`` is). Not
copied: extended attributes and ownership (the snapshot belongs to the user running forkpoint). The source is
walked as ``tree_entries`` walks it: every directory opened relative to its parent with ``O_NOFOLLOW``, every
file with ``O_NOFOLLOW | O_NONBLOCK`` and checked to be regular, so a link a replayed command planted is never
followed and no special file is opened. Anything that cannot be copied fails the whole copy (workspace_error).
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import queue
import stat
import threading
from pathlib import Path
from typing import Any

from forkpoint.core.errors import ErrorKind, ReplayError

_FICLONE = 0x40049409  # linux/fs.h: _IOW(0x94, 9, int)
_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_WRITE_FLAGS = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC

Entries = list[tuple[bytes, dict[str, Any]]]


class _Hasher:
    """One helper thread that feeds chunks to their digests in order; ``finish`` fills each file's ``sha256``."""

    def __init__(self) -> None:
        self._work: queue.Queue[tuple[Any, bytes] | None] = queue.Queue(maxsize=32)
        self._failure: list[BaseException] = []
        self._done: list[tuple[dict[str, Any], Any]] = []
        self._thread = threading.Thread(target=self._run, name="forkpoint-snapshot-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            try:
                item[0].update(item[1])
            except BaseException as exc:  # re-raised by finish: a partial digest is never recorded
                self._failure.append(exc)

    def feed(self, digest: Any, chunk: bytes) -> None:
        self._work.put((digest, chunk))

    def file(self, entry: dict[str, Any], digest: Any) -> None:
        self._done.append((entry, digest))

    def finish(self) -> None:
        self._work.put(None)
        self._thread.join()
        if self._failure:
            raise self._failure[0]
        for entry, digest in self._done:
            entry["sha256"] = digest.hexdigest()


def copy_with_entries(source: Path, target: Path) -> Entries:
    """Copy everything below ``source`` into the empty directory ``target``; returns the copy's entries."""
    hasher = _Hasher()
    try:
        entries = _copy(source, target, hasher)
    finally:
        hasher.finish()
    entries.sort(key=lambda item: item[0])
    return entries


def _copy(source: Path, target: Path, hasher: _Hasher) -> Entries:
    collected: Entries = []
    dirs: list[tuple[bytes, os.stat_result]] = []  # mode and times set last (deepest first): writing changes them
    links: dict[tuple[int, int], dict[str, Any]] = {}
    try:
        src_root = os.open(os.path.abspath(source), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise _failed(source, b"", exc) from None
    pending: list[tuple[bytes, int]] = [(b"", src_root)]
    dst_root = os.fsencode(os.path.abspath(target))
    dirs.append((b"", os.fstat(src_root)))  # the root's mode and times too, as `cp -a SRC/. DEST` sets them
    walk = _Walk(dst_root, collected, pending, dirs, links, hasher)
    try:
        while pending:
            relative_dir, src_fd = pending.pop()
            try:
                dst_fd = os.open(os.path.join(dst_root, relative_dir) if relative_dir else dst_root, _DIR_FLAGS)
                try:
                    for name in os.listdir(src_fd):
                        raw = os.fsencode(name)
                        relative = os.path.join(relative_dir, raw) if relative_dir else raw
                        _one(src_fd, dst_fd, raw, relative, walk)
                finally:
                    os.close(dst_fd)
            except OSError as exc:
                raise _failed(source, relative_dir, exc) from None
            finally:
                os.close(src_fd)
    finally:
        for _, src_fd in pending:
            os.close(src_fd)
    for relative, st in reversed(dirs):
        fd = os.open(os.path.join(dst_root, relative) if relative else dst_root, _DIR_FLAGS)
        try:
            _set_meta(fd, st)
        finally:
            os.close(fd)
    return collected


class _Walk:
    """What one copy accumulates."""

    def __init__(self, root: bytes, collected: Entries, pending: list[tuple[bytes, int]],
                 dirs: list[tuple[bytes, os.stat_result]], links: dict[tuple[int, int], dict[str, Any]],
                 hasher: _Hasher) -> None:
        self.root, self.collected, self.pending, self.dirs, self.links = root, collected, pending, dirs, links
        self.hasher = hasher


def _one(src_dir: int, dst_dir: int, name: bytes, relative: bytes, walk: _Walk) -> None:
    from forkpoint.workspace import special_type, target_entry

    try:
        st = os.stat(name, dir_fd=src_dir, follow_symlinks=False)
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            os.mkdir(name, 0o700, dir_fd=dst_dir)
            child = os.open(name, _DIR_FLAGS, dir_fd=src_dir)
            walk.collected.append((relative, {"type": "dir"}))
            walk.pending.append((relative, child))
            walk.dirs.append((relative, st))
        elif stat.S_ISLNK(mode):
            link = os.readlink(name, dir_fd=src_dir)
            os.symlink(link, name, dir_fd=dst_dir)
            os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dst_dir, follow_symlinks=False)
            walk.collected.append((relative, {"type": "symlink", **target_entry(link)}))
        elif stat.S_ISREG(mode):
            known = walk.links.get((st.st_dev, st.st_ino)) if st.st_nlink > 1 else None
            if known is not None:  # a hard link inside the tree stays one (as cp -a keeps it)
                os.link(known["path"], name, dst_dir_fd=dst_dir, follow_symlinks=False)
                walk.collected.append((relative, known["entry"]))
                return
            entry = _copy_file(src_dir, dst_dir, name, walk.hasher)
            walk.collected.append((relative, entry))
            if st.st_nlink > 1:
                walk.links[(st.st_dev, st.st_ino)] = {"path": os.path.join(walk.root, relative), "entry": entry}
        else:
            os.mknod(name, stat.S_IFMT(mode) | 0o600, st.st_rdev, dir_fd=dst_dir)
            os.chmod(name, stat.S_IMODE(mode), dir_fd=dst_dir)  # our own fresh node, never a link
            os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dst_dir, follow_symlinks=False)
            walk.collected.append((relative, {"type": special_type(mode)}))
    except OSError as exc:
        raise ReplayError(ErrorKind.WORKSPACE, f"cannot snapshot {os.fsdecode(relative)}: "
                                               f"{exc.strerror or exc}") from None


def _copy_file(src_dir: int, dst_dir: int, name: bytes, hasher: _Hasher) -> dict[str, Any]:
    source = os.open(name, _READ_FLAGS, dir_fd=src_dir)
    try:
        found = os.fstat(source)
        if not stat.S_ISREG(found.st_mode):  # swapped since the lstat
            raise OSError(errno.EAGAIN, "changed while copied")
        target = os.open(name, _WRITE_FLAGS, 0o600, dir_fd=dst_dir)
        try:
            digest = hashlib.sha256()
            size = _hash_clone(target, digest, hasher) if _reflink(source, target) else \
                _copy_bytes(source, target, digest, hasher)
            _set_meta(target, found)
        finally:
            os.close(target)
    finally:
        os.close(source)
    entry = {"type": "file", "size": size, "executable": bool(found.st_mode & 0o111)}
    hasher.file(entry, digest)
    return entry


def _reflink(source: int, target: int) -> bool:
    try:
        fcntl.ioctl(target, _FICLONE, source)
    except OSError:
        return False
    return True


def _hash_clone(clone: int, digest: Any, hasher: _Hasher) -> int:
    """The clone's own bytes (read once; the source may change after the clone, the clone does not)."""
    size = 0
    while chunk := os.read(clone, _CHUNK):
        hasher.feed(digest, chunk)
        size += len(chunk)
    return size


def _copy_bytes(source: int, target: int, digest: Any, hasher: _Hasher) -> int:
    size = 0
    while chunk := os.read(source, _CHUNK):
        view = memoryview(chunk)
        while view:
            view = view[os.write(target, view):]
        hasher.feed(digest, chunk)
        size += len(chunk)
    return size


def _set_meta(fd: int, st: os.stat_result) -> None:
    os.chmod(fd, stat.S_IMODE(st.st_mode))
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))


def _failed(source: Path, relative: bytes, exc: OSError) -> ReplayError:
    shown = os.fsdecode(os.path.join(os.fsencode(source), relative)) if relative else str(source)
    return ReplayError(ErrorKind.WORKSPACE, f"cannot snapshot {shown}: {exc.strerror or exc}")
