"""Sandbox registry: ``--sandbox NAME`` -> "module:class", imported only when that backend is used.

See ``sandbox.base`` for the protocol, ``local`` and ``bwrap`` for the backends, docs/sandboxes.md for the
user-facing description.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from forkpoint.core.errors import configuration

if TYPE_CHECKING:
    from forkpoint.sandbox.base import Sandbox

SANDBOXES: dict[str, str] = {
    "local": "forkpoint.sandbox.local:LocalSandbox",
    "bwrap": "forkpoint.sandbox.bwrap:BwrapSandbox",
}
DEFAULT_SANDBOX = "local"


def unknown_sandbox_message(name: str) -> str:
    return f"unknown sandbox {name!r}; expected one of: {', '.join(SANDBOXES)}"


def open_sandbox(name: str, workspace: Path, recorded_cwd: str | None, path_map: Sequence[str] = (), *,
                 rootfs: str | None = None, image: str | None = None) -> Sandbox:
    """Build the run's sandbox; refuses (ReplayError) a workspace the backend cannot place or an unusable backend.
    ``rootfs`` / ``image``: bwrap with that root file system (``sandbox.rootfs``; an image is unpacked first)."""
    from forkpoint.sandbox.base import PathMap

    if rootfs is not None or image is not None:
        if name != "bwrap":
            raise configuration("--rootfs / --image give the bubblewrap sandbox its root file system: use them "
                                "with --sandbox bwrap")
        if path_map:
            raise configuration("--path-map is for --sandbox local")
        from forkpoint.sandbox.rootfs import open_rootfs

        return open_rootfs(workspace, recorded_cwd, rootfs=rootfs, image=image)
    target = SANDBOXES.get(name)
    if target is None:
        raise configuration(unknown_sandbox_message(name))
    module_name, _, attribute = target.partition(":")
    backend = getattr(importlib.import_module(module_name), attribute)
    sandbox: Sandbox = backend(workspace, recorded_cwd, PathMap.parse(path_map))
    return sandbox


def local_sandbox(workspace: Path) -> Sandbox:
    """The default for callers without a run sandbox: no isolation, no recorded-path check."""
    from forkpoint.sandbox.local import LocalSandbox

    return LocalSandbox(workspace)


def runtime_paths(entrypoint: Path) -> tuple[Path, ...]:
    """What an agent binary needs to be visible inside a sandbox: its runtime install (the directory holding
    forkpoint's runtime manifest), else the directory of the binary; for the path as given and resolved."""
    from forkpoint.runtimes import MANIFEST_NAME

    found: list[Path] = []
    for path in dict.fromkeys((Path(entrypoint).absolute(), Path(entrypoint).resolve())):
        root = next((parent for parent in path.parents if (parent / MANIFEST_NAME).is_file()), path.parent)
        found.append(root)
    return tuple(dict.fromkeys(found))


def interpreter_paths(python: Path) -> tuple[Path, ...]:
    """What a Python interpreter needs to be visible inside a sandbox: its runtime (``runtime_paths``: a venv's
    folder) and the install the venv's ``python`` links to (``<prefix>/bin/python3.x`` -> ``<prefix>``, its
    standard library), which may sit under a hidden home (pyenv, uv)."""
    real = Path(os.path.realpath(python))
    prefix = real.parent.parent if real.parent.name == "bin" else real.parent
    return tuple(dict.fromkeys((*runtime_paths(python), prefix)))


#: XDG base directories, relative to the agent's isolated HOME (their usual defaults).
XDG_DIRS = {
    "XDG_CONFIG_HOME": ".config",
    "XDG_DATA_HOME": ".local/share",
    "XDG_CACHE_HOME": ".cache",
    "XDG_STATE_HOME": ".local/state",
}


def home_environment(env: dict[str, str], home: Path) -> dict[str, str]:
    """Point HOME and every XDG base directory at the agent's isolated home (under the state dir), in place.

    XDG_RUNTIME_DIR (the user's session sockets) and XDG_CONFIG_DIRS/XDG_DATA_DIRS overrides are dropped.
    """
    for name in ("XDG_RUNTIME_DIR", "XDG_CONFIG_DIRS", "XDG_DATA_DIRS"):
        env.pop(name, None)
    env["HOME"] = str(home)
    for name, relative in XDG_DIRS.items():
        env[name] = str(home / relative)
    return env
