"""``--sandbox local`` (the default): no isolation; tools and the agent run in the workspace on the host.

Recorded tool inputs name absolute paths under the recorded cwd, so the workspace must BE at the recorded path,
or ``--path-map RECORDED=WORKSPACE`` must say how recorded paths map to it (rewritten in tool inputs for
execution, mapped back in outputs: see ``sandbox.base``). Anything else is refused before the run starts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.sandbox.base import PathMap, Sandbox


def refusal(recorded: str, workspace: str) -> str:
    """The one message for a workspace that is not at the recorded path, with the ways out."""
    return (
        f"the trajectory was recorded in {recorded} but the workspace is {workspace}, and recorded tool inputs "
        f"name absolute paths under {recorded}. Either mount the workspace at the recorded path in a bubblewrap "
        f"sandbox (--sandbox bwrap), or rewrite recorded paths in tool inputs for execution "
        f"(--path-map {recorded}={workspace}); a fresh workspace at {recorded} itself also works"
    )


class LocalSandbox(Sandbox):
    name = "local"

    def __init__(self, workspace: Path, recorded_cwd: str | None = None, path_map: PathMap | None = None) -> None:
        self.workspace = Path(os.path.abspath(workspace))
        absolute = str(self.workspace)
        self.cwd = absolute
        self.roots = tuple(dict.fromkeys((os.path.realpath(absolute), absolute)))
        self.path_map = path_map or PathMap()
        self.path_rewrites: list[dict[str, Any]] = []
        self.path_restores: list[dict[str, Any]] = []
        self.recorded_cwd = recorded_cwd
        if recorded_cwd is not None:
            self._check(recorded_cwd)

    def _check(self, recorded: str) -> None:
        target = self.path_map.map_path(recorded) if self.path_map else os.path.normpath(recorded)
        if target in self.roots:
            return
        if self.path_map and target != os.path.normpath(recorded):
            raise ReplayError(
                ErrorKind.WORKSPACE,
                f"--path-map maps the recorded cwd {recorded} to {target}, but the workspace is {self.cwd}; "
                f"map it to the workspace (--path-map {recorded}={self.cwd}) or use --sandbox bwrap",
            )
        raise ReplayError(ErrorKind.WORKSPACE, refusal(recorded, self.cwd))

    def host_path(self, path: str) -> str:
        return path

    def confine(
        self, argv: Sequence[str], cwd: str, *, network: bool, writable: Sequence[Path], readable: Sequence[Path]
    ) -> tuple[list[str], Path]:
        del network, writable, readable  # no isolation: everything the host has is reachable
        return list(argv), Path(cwd)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "isolation": "none",
            "workspace": str(self.workspace),
            "agent_cwd": self.cwd,
            "recorded_cwd": self.recorded_cwd,
            "network_during_tool_replay": "host",
            "path_map": self.path_map.to_json(),
        }
