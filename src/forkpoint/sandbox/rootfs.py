"""``--sandbox bwrap --rootfs DIR`` / ``--image FILE``: the recording's own environment as the sandbox's root.

Like ``sandbox.bwrap``, but the root is the image's file system instead of the host's: bwrap's tmpfs root gets
read-only binds of the ROOT's top-level entries (its symlinks recreated, never followed on the host), a fresh
``/proc`` and ``/dev``, private ``/tmp`` and ``/var/tmp``, the workspace at the recorded cwd (read-write) and the
host paths the command needs (the agent runtime, its HOME, forkpoint's scratch) at their host paths. A bind
target whose parent is a directory of the image gets that directory as a skeleton (a tmpfs holding read-only
binds of its entries), so the image's own files there stay visible and nothing is created in the unpacked image.
The image's ``Env`` (config) is set for every command, except HOME and the loader's ``LD_*`` variables.

Programs forkpoint brings from the host (the agent runtime's interpreter, forkpoint's own helpers) must not load
the image's C library: a host ELF outside the system directories runs through the host's dynamic loader, bound
with the host's library folders at ``/.forkpoint-host/<n>`` (``ld.so --library-path``); everything it starts (the
replayed commands) is the image's own program on the image's own libraries.

The image root is read-only (bubblewrap 0.8 has no overlay): a replayed command can write the workspace, /tmp and
its HOME only; ``pip install`` into the image's site-packages fails as on a read-only container.
"""

from __future__ import annotations

import os
import stat
import struct
import sysconfig
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from forkpoint.core.errors import ErrorKind, ReplayError, configuration
from forkpoint.sandbox.base import PathMap, within
from forkpoint.sandbox.bwrap import _SYSTEM_DIRS, BwrapSandbox, _check_recorded, _find_bwrap, namespaces

HOST_DIR = "/.forkpoint-host"
_HIDDEN = ("/tmp", "/var/tmp")
_KERNEL = ("proc", "dev", "sys")
#: the image's Env names never taken over (forkpoint's HOME; the loader's variables would reach host programs)
_KEEP_OUT = ("HOME", "TMPDIR")


def elf_interpreter(path: str) -> str | None:
    """The PT_INTERP of a 64-bit little-endian ELF executable (its dynamic loader), None for anything else."""
    try:
        with open(path, "rb") as handle:
            header = handle.read(64)
            if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
                return None
            phoff, = struct.unpack_from("<Q", header, 0x20)
            phentsize, phnum = struct.unpack_from("<HH", header, 0x36)
            for index in range(min(phnum, 64)):
                handle.seek(phoff + index * phentsize)
                entry = handle.read(56)
                if len(entry) < 56:
                    return None
                kind, = struct.unpack_from("<I", entry, 0)
                if kind == 3:  # PT_INTERP
                    offset, = struct.unpack_from("<Q", entry, 8)
                    size, = struct.unpack_from("<Q", entry, 32)
                    handle.seek(offset)
                    return handle.read(min(size, 4096)).rstrip(b"\0").decode("utf-8", "replace")
    except OSError:
        return None
    return None


def _host_library_dirs() -> list[str]:
    triplet = sysconfig.get_config_var("MULTIARCH") or f"{os.uname().machine}-linux-gnu"
    found: list[str] = []
    for path in (f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib64", "/usr/lib64", "/lib", "/usr/lib"):
        real = os.path.realpath(path)
        if os.path.isdir(real) and real not in found:
            found.append(real)
    return found


class RootfsSandbox(BwrapSandbox):
    """bwrap with ``root`` (an unpacked image, or a folder) as ``/``; see the module docstring."""

    def __init__(self, workspace: Path, recorded_cwd: str | None = None, path_map: PathMap | None = None, *,
                 root: Path, image_env: Mapping[str, str] | None = None, origin: Mapping[str, Any] | None = None
                 ) -> None:
        if path_map:
            raise configuration("--path-map is for --sandbox local; a root file system sandbox mounts the "
                                "workspace at the recorded path")
        self.root = Path(os.path.realpath(root))
        if not self.root.is_dir():
            raise configuration(f"--rootfs {root}: not a directory")
        self.workspace = Path(os.path.abspath(workspace))
        self.recorded_cwd = recorded_cwd
        cwd = os.path.normpath(recorded_cwd) if recorded_cwd is not None else "/workspace"
        self.hidden = _HIDDEN
        _check_recorded(cwd, self.hidden)  # not over system directories nor in /proc, /dev, /sys
        self._check_in_root(cwd)
        self.cwd = cwd
        self.roots = (cwd,)
        self.path_map = PathMap()
        self.path_rewrites: list[dict[str, Any]] = []
        self.path_restores: list[dict[str, Any]] = []
        self.image_env = {name: value for name, value in (image_env or {}).items()
                          if name not in _KEEP_OUT and not name.startswith("LD_")}
        self.origin = dict(origin or {"rootfs": str(self.root)})
        self.library_dirs = _host_library_dirs()
        self._bound_files: dict[str, str] = {}  # where inside -> the host file (``host_file``)
        self.executable = _find_bwrap()
        self._probe()

    def _check_in_root(self, cwd: str) -> None:
        probe = self.root
        for part in Path(cwd).parts[1:]:
            probe = probe / part
            try:
                mode = os.lstat(probe).st_mode
            except FileNotFoundError:
                return
            if not stat.S_ISDIR(mode):
                raise ReplayError(ErrorKind.WORKSPACE, f"the recorded cwd {cwd} cannot be mounted in the image: "
                                                       f"{probe.relative_to(self.root)} is not a directory there")

    # ------------------------------------------------------------------ the host's programs

    def host_command(self, argv: Sequence[str]) -> list[str]:
        """A dynamically linked host program outside the system folders runs on the host's loader and libraries."""
        program = argv[0] if argv else ""
        if not os.path.isabs(program) or any(within(program, system) for system in _SYSTEM_DIRS):
            return list(argv)
        if program.startswith(HOST_DIR + "/"):
            source = self._bound_files.get(program)  # a host system file bound apart (``host_file``)
            if source is None:
                return list(argv)
        else:
            source = os.path.realpath(program)
        interpreter = elf_interpreter(source)
        if interpreter is None:
            return list(argv)
        loader = os.path.realpath(interpreter)
        directory = os.path.dirname(loader)
        if directory not in self.library_dirs:
            self.library_dirs.insert(0, directory)
        index = self.library_dirs.index(directory)
        library_path = ":".join(f"{HOST_DIR}/{n}" for n in range(len(self.library_dirs)))
        return [f"{HOST_DIR}/{index}/{os.path.basename(loader)}", "--library-path", library_path, *argv]

    def host_file(self, path: str) -> str:
        """A host file in the system folders (the host's ``/usr/bin/node``, its CA bundle: the same path names the
        image's file there, or nothing) is bound read-only at ``/.forkpoint-host/file/<n>/<name>``; others stay
        put (bound at their own paths as ``readable``)."""
        if not any(within(path, system) for system in _SYSTEM_DIRS):
            return path
        source = os.path.realpath(path)
        for bound, known in self._bound_files.items():
            if known == source:
                return bound
        bound = f"{HOST_DIR}/file/{len(self._bound_files)}/{os.path.basename(source)}"
        self._bound_files[bound] = source
        return bound

    # ------------------------------------------------------------------ running

    def arguments(
        self, cwd: str, *, network: bool, writable: Sequence[Path] = (), readable: Sequence[Path] = ()
    ) -> list[str]:
        args = [self.executable, *self._skeleton("/"), "--proc", "/proc", "--dev", "/dev"]
        binds = [(str(self.workspace), self.cwd, "--bind")]
        binds += [(str(path), str(path), "--bind") for path in writable]
        binds += [(str(path), str(path), "--ro-bind-try") for path in readable
                  if not any(within(str(path), system) for system in _SYSTEM_DIRS)]  # never hide the image's
        skeletons = sorted({d for _, target, _ in binds if (d := self._parent_skeleton(target)) is not None},
                           key=lambda path: (path.count("/"), path))
        for directory in skeletons:
            args += ["--tmpfs", directory, *self._skeleton(directory)]
        if os.path.isdir(self.root / "var" / "tmp") and not os.path.islink(self.root / "var"):
            args += ["--tmpfs", "/var/tmp"]
        for source, target, how in binds:
            args += [how, source, target]
        for index, directory in enumerate(self.library_dirs):
            args += ["--ro-bind", directory, f"{HOST_DIR}/{index}"]
        for bound, source in self._bound_files.items():
            args += ["--ro-bind", source, bound]
        for directory in reversed(skeletons):
            args += ["--remount-ro", directory]
        args += ["--remount-ro", "/"]
        return [*args, *namespaces(cwd, network, self.image_env)]

    def confine(
        self, argv: Sequence[str], cwd: str, *, network: bool, writable: Sequence[Path], readable: Sequence[Path]
    ) -> tuple[list[str], Path]:
        return super().confine(self.host_command(argv), cwd, network=network, writable=writable, readable=readable)

    def _skeleton(self, directory: str) -> list[str]:
        """``directory``'s entries in the image, bound read-only (symlinks recreated, never followed here)."""
        args: list[str] = []
        source = self.root / directory.lstrip("/")
        try:
            entries = sorted(os.scandir(source), key=lambda entry: entry.name)
        except OSError:
            return args
        for entry in entries:
            target = os.path.join(directory, entry.name)
            if directory == "/" and entry.name in _KERNEL:
                continue
            if target in self.hidden:
                args += ["--tmpfs", target]
            elif entry.is_symlink():
                args += ["--symlink", os.readlink(entry.path), target]
            elif entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
                args += ["--ro-bind", entry.path, target]
        if directory == "/":
            args += [arg for hidden in self.hidden if not (self.root / hidden.lstrip("/")).exists()
                     and os.path.dirname(hidden) == "/" for arg in ("--tmpfs", hidden)]
        return args

    def _parent_skeleton(self, target: str) -> str | None:
        """The deepest directory of the image above a missing ``target`` (a skeleton lets bwrap create it)."""
        if any(within(target, hidden) for hidden in self.hidden):
            return None
        probe = target
        while probe != "/":
            path = self.root / probe.lstrip("/")
            if os.path.lexists(path):
                if probe == target or not os.path.isdir(path) or os.path.islink(path):
                    return None
                return probe
            probe = os.path.dirname(probe)
        return None

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        described.update({"isolation": "bubblewrap, image root file system", "root": {
            **self.origin, "path": str(self.root), "env": sorted(self.image_env),
            "writable": ["the workspace", "/tmp", "/var/tmp", "the agent HOME"]}, "hidden": list(self.hidden)})
        return described


def open_rootfs(workspace: Path, recorded_cwd: str | None, *, rootfs: str | None, image: str | None
                ) -> RootfsSandbox:
    """The sandbox of ``--rootfs DIR`` or ``--image FILE`` (unpacked, cached by digest, before the run starts)."""
    if image is not None:
        from forkpoint.sandbox.image import unpack_image

        unpacked = unpack_image(Path(image))
        return RootfsSandbox(workspace, recorded_cwd, root=unpacked.root, image_env=unpacked.env,
                             origin=unpacked.metadata)
    assert rootfs is not None
    return RootfsSandbox(workspace, recorded_cwd, root=Path(rootfs), origin={"rootfs": os.path.abspath(rootfs)})
