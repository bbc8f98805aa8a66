"""Confined file access inside a workspace root (Linux), and bounded reads of forkpoint's own inputs.

Replayed tool calls read and write paths chosen by a model, in a workspace that the replayed commands can
change at any moment. Checking a resolved path and then opening it lets a symlink swapped in between lead
outside the root, so nothing here hands a path with more than one component to the kernel:

- every component is opened relative to its parent's fd with ``O_NOFOLLOW`` (``..`` pops our own stack of
  directory fds, so the kernel never climbs);
- a symlink component is read with ``readlink`` and its target is walked again the same way: from the
  root if absolute (it must lie under the root), else from the symlink's directory; at most 40 hops;
- the final component is opened with ``O_NOFOLLOW|O_NONBLOCK``, and reads check ``fstat`` of the *opened*
  inode, so a FIFO never blocks and a device or socket is never read.

The ``*_strict`` helpers are for folders that sandboxed code can write (the agent HOME, scratch and persisted-
output folders, continued session files): there a symbolic link anywhere below the root is refused
(``PlantedLinkError``), not resolved, since forkpoint itself never puts one there.

``ConfinementError`` and ``NotRegularFileError`` are plain exceptions: the tool layer decides whether they
become an error observation or a refusal. Other failures are the ``OSError`` of the failing call, carrying
the caller's path rather than one component.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from forkpoint.core.errors import ErrorKind, ReplayError

MAX_SYMLINK_HOPS = 40
DEFAULT_MAX_INPUT_BYTES = 256 * 1024 * 1024

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FINAL_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_READ_CHUNK = 1024 * 1024

_T = TypeVar("_T")


class ConfinementError(Exception):
    """The path (or a symlink on the way) leads outside the workspace root."""


class PlantedLinkError(ConfinementError):
    """A symbolic link where forkpoint's own file or folder must be: sandboxed code planted it; never followed."""


class NotRegularFileError(Exception):
    """The path names a directory, FIFO, device or socket where a regular file is required."""


class InputTooLargeError(Exception):
    """A forkpoint input exceeds its size bound."""


class InputChangedError(Exception):
    """A forkpoint input changed size while it was being read."""


@dataclass(frozen=True)
class ReadResult:
    data: bytes
    truncated: bool
    size: int


class _FinalSymlink(Exception):
    """Raised by a final-step opener that found a symlink, so the walk resolves it."""


# --------------------------------------------------------------------------------------------- the walk


def _split(path: str) -> list[str]:
    return [part for part in path.split("/") if part not in ("", ".")]


def _root_relative(roots: tuple[str, ...], absolute: str, shown: str) -> list[str]:
    """Components of an absolute path below the root (lexically normalised), or ConfinementError."""
    normal = os.path.normpath(absolute)
    for root in roots:
        if normal == root:
            return []
        prefix = root.rstrip("/") + "/"
        if normal.startswith(prefix):
            return _split(normal[len(prefix) :])
    raise ConfinementError(f"path escapes workspace: {shown}")


def _is_symlink(dir_fd: int, name: str) -> str | None:
    """The symlink's target, or None when ``name`` is not (or no longer) a symlink."""
    try:
        return os.readlink(name, dir_fd=dir_fd)
    except OSError:
        return None


def _walk(
    root: Path,
    path: str | Path,
    final: Callable[[int, str], _T],
    *,
    follow_final: bool,
    create_parents: bool = False,
    aliases: tuple[str, ...] = (),
    links: bool = True,
) -> _T:
    """Walk ``path`` from ``root`` component by component and call ``final(dir_fd, name)`` on the last one.

    ``name`` is "." when the path ends at a directory (root, ``a/..``). ``final`` raises ``_FinalSymlink``
    (or an ``ELOOP`` OSError) when the name is a symlink, which is then resolved here when allowed.
    ``aliases`` are other absolute spellings of ``root`` (the recorded cwd a sandbox mounts the workspace at):
    absolute paths and absolute symlink targets under them are walked from ``root`` too. ``links=False``:
    any symlink met, the root's last component included, raises ``PlantedLinkError`` instead.
    """
    shown = os.fspath(path)
    root_abs = os.path.normpath(os.path.abspath(root))
    roots = (root_abs, os.path.realpath(root_abs), *(os.path.normpath(alias) for alias in aliases))
    pending = deque(_root_relative(roots, shown, shown) if os.path.isabs(shown) else _split(shown))
    try:
        stack = [os.open(root_abs, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if links else os.O_NOFOLLOW))]
    except OSError as exc:
        if not links and exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(root_abs):
            raise PlantedLinkError(f"{root_abs} is a symbolic link; not followed") from None
        raise
    hops = 0
    current = shown  # the component being resolved, for messages

    def follow(target: str) -> None:
        nonlocal hops
        if not links:
            raise PlantedLinkError(f"{shown}: {current} is a symbolic link; not followed")
        hops += 1
        if hops > MAX_SYMLINK_HOPS:
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), shown)
        if os.path.isabs(target):
            components = _root_relative(roots, target, shown)
            while len(stack) > 1:
                os.close(stack.pop())
        else:
            components = _split(target)
        pending.extendleft(reversed(components))

    try:
        while True:
            if not pending:
                return final(stack[-1], ".")
            name = pending.popleft()
            current = name
            if name == "..":
                if len(stack) == 1:
                    raise ConfinementError(f"path escapes workspace: {shown}")
                os.close(stack.pop())
                continue
            if not pending:
                try:
                    return final(stack[-1], name)
                except (_FinalSymlink, OSError) as exc:
                    # O_NOFOLLOW on a symlink: ELOOP, or ENOTDIR when O_DIRECTORY was asked for.
                    if isinstance(exc, OSError) and exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                        raise
                    target = _is_symlink(stack[-1], name)
                    if target is None:
                        if isinstance(exc, OSError):
                            raise
                        target = name  # swapped back since `final` looked: look again (counts as a hop)
                    elif not links:
                        raise PlantedLinkError(f"{shown}: {name} is a symbolic link; not followed") from None
                    elif not follow_final:
                        raise OSError(errno.ELOOP, "final component is a symbolic link", shown) from None
                    follow(target)
                    continue
            try:
                stack.append(os.open(name, _DIR_FLAGS, dir_fd=stack[-1]))
            except FileNotFoundError:
                if not create_parents:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o777, dir_fd=stack[-1])
                pending.appendleft(name)  # open it again: it may have been swapped for a symlink meanwhile
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                target = _is_symlink(stack[-1], name)
                if target is None:
                    raise
                follow(target)
    except OSError as exc:
        if exc.filename == shown or exc.errno is None:
            raise
        raise type(exc)(exc.errno, exc.strerror, shown) from exc
    finally:
        for fd in stack:
            os.close(fd)


# --------------------------------------------------------------------------------------------- public API


def open_confined(
    root: Path,
    relative_or_absolute: str | Path,
    flags: int,
    mode: int = 0o644,
    *,
    follow_final_symlink_inside: bool = True,
    aliases: tuple[str, ...] = (),
) -> int:
    """Open a path that must stay inside ``root`` even if the tree changes concurrently; returns an fd.

    The fd carries ``O_NONBLOCK`` (so opening a FIFO never waits); the caller closes it.
    """

    def opener(dir_fd: int, name: str) -> int:
        return os.open(name, flags | _FINAL_FLAGS, mode, dir_fd=dir_fd)

    return _walk(root, relative_or_absolute, opener, follow_final=follow_final_symlink_inside, aliases=aliases)


def _require_regular(st: os.stat_result, shown: str) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFileError(f"not a regular file: {shown}")


def _read_upto(fd: int, limit: int) -> bytes:
    """Read at most ``limit`` bytes; only bytes actually read are held, so sparse files stay cheap."""
    parts: list[bytes] = []
    remaining = limit
    while remaining > 0:
        chunk = os.read(fd, min(remaining, _READ_CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


def read_regular_file(root: Path, path: str | Path, *, max_bytes: int, aliases: tuple[str, ...] = ()) -> ReadResult:
    """Read the head of a regular file inside ``root``: ``max_bytes`` at most, ``truncated`` if more exist."""
    if max_bytes < 0:
        raise ValueError("max_bytes must not be negative")
    shown = os.fspath(path)

    def opener(dir_fd: int, name: str) -> int:
        # Look before opening so a device or socket is never opened (opening can have side effects);
        # the fstat after the open is the check that counts.
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            pass
        else:
            if stat.S_ISLNK(st.st_mode):
                raise _FinalSymlink(name)
            _require_regular(st, shown)
        return os.open(name, os.O_RDONLY | _FINAL_FLAGS, dir_fd=dir_fd)

    fd = _walk(root, path, opener, follow_final=True, aliases=aliases)
    try:
        st = os.fstat(fd)
        _require_regular(st, shown)
        data = _read_upto(fd, max_bytes + 1)
    finally:
        os.close(fd)
    return ReadResult(data=data[:max_bytes], truncated=len(data) > max_bytes, size=st.st_size)


def _replacing_writer(shown: str, write: Callable[[int], None], mode: int | None) -> Callable[[int, str], None]:
    """A final step that writes a new inode beside ``name`` and renames it over (see write_file_confined)."""

    def writer(dir_fd: int, name: str) -> None:
        if name == ".":
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), shown)
        try:
            st: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            st = None
        if st is not None:
            if stat.S_ISLNK(st.st_mode):
                raise _FinalSymlink(name)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), shown)
            _require_regular(st, shown)
        temp = f".forkpoint-{uuid.uuid4().hex}.tmp"
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FINAL_FLAGS, 0o666, dir_fd=dir_fd)
        try:
            try:
                if mode is not None:
                    os.fchmod(fd, mode)
                elif st is not None:
                    os.fchmod(fd, stat.S_IMODE(st.st_mode))
                write(fd)
            finally:
                os.close(fd)
            # A rename replaces whatever is at `name` now (even a swapped-in symlink) and follows nothing.
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            raise

    return writer


def _write_all(data: bytes) -> Callable[[int], None]:
    def write(fd: int) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]

    return write


def write_file_confined(
    root: Path, path: str | Path, data: bytes, *, create_parents: bool = False, aliases: tuple[str, ...] = ()
) -> None:
    """Replace a file inside ``root`` with ``data``, atomically, through a temp file in the same directory.

    A final symlink is followed only while its target stays inside ``root``. Writing a new inode (rather
    than truncating in place) means a hard link inside the root to a file outside is replaced, never
    written through. An existing file keeps its permission bits. No fsync: the workspace is disposable.
    """
    writer = _replacing_writer(os.fspath(path), _write_all(data), None)
    _walk(root, path, writer, follow_final=True, create_parents=create_parents, aliases=aliases)


# ------------------------------------------------------------------- folders that sandboxed code can write


def open_regular_strict(root: Path, path: str | Path) -> int:
    """An fd (read-only, non-blocking) on a regular file below ``root``; no symlink followed on the way.

    ``PlantedLinkError`` for a symlink anywhere below ``root``, ``NotRegularFileError`` for a FIFO, device,
    socket or directory (looked at before opening, checked again on the opened inode), ``FileNotFoundError``.
    """
    shown = os.fspath(path)

    def opener(dir_fd: int, name: str) -> int:
        if name == ".":
            raise NotRegularFileError(f"not a regular file: {shown}")
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISLNK(st.st_mode):
            raise _FinalSymlink(name)
        _require_regular(st, shown)
        return os.open(name, os.O_RDONLY | _FINAL_FLAGS, dir_fd=dir_fd)

    fd = _walk(root, path, opener, follow_final=False, links=False)
    try:
        _require_regular(os.fstat(fd), shown)
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file_strict(root: Path, path: str | Path, *, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> bytes:
    """A whole regular file below ``root`` that sandboxed code could have replaced (see open_regular_strict).

    More than ``max_bytes`` is ``InputTooLargeError``: a file that keeps growing is never read to the end.
    """
    fd = open_regular_strict(root, path)
    try:
        data = _read_upto(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise InputTooLargeError(f"{path} exceeds {max_bytes} bytes")
    return data


def lstat_strict(root: Path, path: str | Path) -> os.stat_result | None:
    """The entry's own metadata (None when absent); the folders on the way are opened without following links."""

    def look(dir_fd: int, name: str) -> os.stat_result | None:
        try:
            return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    try:
        return _walk(root, path, look, follow_final=False, links=False)
    except FileNotFoundError:
        return None


def make_dirs_strict(root: Path, path: str | Path, mode: int = 0o700) -> None:
    """``mkdir -p`` below ``root``; an existing symlink (or other non-directory) on the way is refused."""
    shown = os.fspath(path)

    def make(dir_fd: int, name: str) -> None:
        if name == ".":
            return
        try:
            os.mkdir(name, mode, dir_fd=dir_fd)
        except FileExistsError:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise PlantedLinkError(f"{shown}: {name} is a symbolic link; not followed") from None
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), shown) from None

    _walk(root, path, make, follow_final=False, create_parents=True, links=False)


def write_file_strict(root: Path, path: str | Path, data: bytes, *, mode: int = 0o600) -> None:
    """Atomically replace a file below ``root`` (parents created), no symlink followed anywhere on the way.

    A symlink or special file planted at the name itself is refused too (not silently replaced): the
    caller reports what sandboxed code did.
    """
    writer = _replacing_writer(os.fspath(path), _write_all(data), mode)
    _walk(root, path, writer, follow_final=False, create_parents=True, links=False)


def copy_fd_strict(source_fd: int, root: Path, path: str | Path, *, max_bytes: int, mode: int = 0o600) -> int:
    """Copy at most ``max_bytes`` from ``source_fd`` (read from its current offset) into a new file below
    ``root`` (as write_file_strict); returns the number of bytes copied."""
    copied = 0

    def write(fd: int) -> None:
        nonlocal copied
        while copied < max_bytes:
            chunk = os.read(source_fd, min(_READ_CHUNK, max_bytes - copied))
            if not chunk:
                break
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]
            copied += len(chunk)

    _walk(root, path, _replacing_writer(os.fspath(path), write, mode), follow_final=False, create_parents=True,
          links=False)
    return copied


@contextlib.contextmanager
def refused_as(kind: ErrorKind, what: str) -> Iterator[None]:
    """A strict helper's refusal (a link, FIFO, device or oversized file where forkpoint's own file must be)
    becomes a ``ReplayError`` of ``kind`` that names ``what``; other errors pass through unchanged."""
    try:
        yield
    except (ConfinementError, NotRegularFileError, InputTooLargeError) as exc:
        raise ReplayError(kind, f"{what}: refused: {exc} (sandboxed code can write there; forkpoint follows no "
                                "link and opens no FIFO or device in it)") from None


def read_sandbox_file(root: Path, path: Path, *, kind: ErrorKind, what: str,
                      max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> bytes:
    """A file that sandboxed code wrote (or could have replaced) at ``path`` below ``root``, read strictly
    (read_file_strict); every failure, a missing file included, is a ``ReplayError`` of ``kind``."""
    try:
        with refused_as(kind, f"read {what} {path}"):
            return read_file_strict(root, path.relative_to(root), max_bytes=max_bytes)
    except OSError as exc:
        raise ReplayError(kind, f"read {what} {path}: {exc.strerror or exc}") from None


def split_lines(source: bytes) -> Iterator[tuple[int, int, bytes]]:
    """(1-based number, byte offset, line with its ``\n`` if any) of every line of a JSONL buffer."""
    offset, number, size = 0, 0, len(source)
    while offset < size:
        end = source.find(b"\n", offset)
        end = size if end < 0 else end + 1
        number += 1
        yield number, offset, source[offset:end]
        offset = end


_BLANK = re.compile(rb"\s*")


def split_line_views(source: bytes) -> Iterator[tuple[int, int, memoryview, bool]]:
    """(1-based number, byte offset, the line WITHOUT its ``\n`` as a view into ``source``, whether it had one) of
    every line of a JSONL buffer. No line is copied: a parser hands the view to orjson, so a 20 MB line is held
    once (in ``source``) while parsed, not three times (``split_lines``' slice, its copy without the ``\n``)."""
    view = memoryview(source)
    offset, number, size = 0, 0, len(source)
    while offset < size:
        end = source.find(b"\n", offset)
        terminated = end >= 0
        end = end if terminated else size
        number += 1
        yield number, offset, view[offset:end], terminated
        offset = end + 1


def is_blank(line: bytes | memoryview) -> bool:
    """Whether ``line`` is only ASCII whitespace (``bytes.strip()`` empty), without copying it."""
    return _BLANK.fullmatch(line) is not None


def read_bounded_input(path: Path, max_bytes: int = DEFAULT_MAX_INPUT_BYTES) -> bytes:
    """Read one of forkpoint's own inputs (trajectory, config) whole: a regular file of at most ``max_bytes``.

    Symlinks are followed (the user named the file), but a FIFO or device is refused without blocking,
    and a file that grows or shrinks while read is refused rather than parsed half-written.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        _require_regular(st, os.fspath(path))
        if st.st_size > max_bytes:
            raise InputTooLargeError(f"input exceeds {max_bytes} bytes: {path}")
        # One read sized by fstat holds the file once (a list of chunks joined would hold it twice at the end).
        data = os.read(fd, st.st_size + 1)
        if 0 < len(data) < st.st_size:  # a short read (some file systems): the rest in chunks
            data += _read_upto(fd, st.st_size + 1 - len(data))
    finally:
        os.close(fd)
    if len(data) != st.st_size:
        raise InputChangedError(f"input changed while being read: {path}")
    return data
