"""The one protocol every agent adapter implements; the engine knows nothing else about agents."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from forkpoint.model import NativePrefix, Plan, Trajectory


class Adapter(Protocol):
    name: str
    #: verified agent version -> profile id (how that version's session is rebuilt and resumed)
    verified_versions: Mapping[str, str]
    #: format string of the native prefix file written by ``write_prepared_prefix``
    native_format: str

    def sniff(self, head: bytes) -> bool:
        """True when the first bytes of a file look like this agent's native trajectory."""
        ...

    def parse(self, path: Path) -> Trajectory:
        """Parse a native trajectory. Pure apart from reading ``path``; raises ReplayError only."""
        ...

    def profile_for(self, trajectory: Trajectory) -> str:
        """The verified profile matching the recording's version, or raise unsupported_version."""
        ...

    def write_prepared_prefix(self, plan: Plan, out_dir: Path) -> NativePrefix:
        """Write the native session cut after batch N with the HISTORICAL observations."""
        ...
