"""Locate the pieces of an installed Pi runtime the Node runner needs (Node 22 and the package), and the runner.

A forkpoint Pi runtime is an npm prefix holding the package and the Node it runs on (both declared in the spec);
its entrypoint is the ``forkpoint-bin/pi`` wrapper (see forkpoint.runtimes.npm). The runner imports the package by
path, so it can live inside forkpoint (package data) rather than next to ``node_modules``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from forkpoint.adapters.pi.spec import NPM, SPEC, VERSION
from forkpoint.core.errors import ErrorKind, ReplayError

PACKAGE = NPM.package
NODE_BINARY = Path(NPM.node_binary or "")
RUNNER = Path(__file__).with_name("runner.mjs")


@dataclass(frozen=True)
class PiRuntime:
    root: Path
    node: Path
    version: str

    @property
    def runner(self) -> Path:
        return RUNNER


def from_entrypoint(entrypoint: Path, expected: str | None = None) -> PiRuntime:
    """The runtime behind a ``forkpoint-bin/pi`` wrapper; refuses anything that is not such an install, and one
    holding another package version than ``expected`` (the version whose tools and envelope were chosen)."""
    root = entrypoint.absolute().parent.parent
    node = root / NODE_BINARY
    manifest = root / "node_modules" / PACKAGE / "package.json"
    if not node.is_file():
        raise ReplayError(ErrorKind.CONFIGURATION, f"Pi runtime Node executable does not exist: {node} (install "
                                                   f"with `forkpoint agents install pi@{VERSION}`)")
    try:
        package = json.loads(manifest.read_text("utf-8"))
    except (OSError, ValueError):
        raise ReplayError(ErrorKind.CONFIGURATION, f"Pi runtime package manifest does not exist: {manifest}") from None
    if not isinstance(package, dict) or package.get("name") != PACKAGE:
        raise ReplayError(ErrorKind.CONFIGURATION, f"{manifest} is not the {PACKAGE} package")
    version = package.get("version")
    from forkpoint.runtimes import trial_release

    trying = trial_release("pi", entrypoint)
    if version not in SPEC.versions and (version is None or version != trying):
        raise ReplayError(ErrorKind.UNSUPPORTED_VERSION, f"the Pi runtime at {root} holds {PACKAGE} {version}, "
                                                         f"verified: {', '.join(SPEC.versions)}")
    if expected is not None and version != expected and version != trying:
        raise ReplayError(ErrorKind.UNSUPPORTED_VERSION, f"the Pi runtime at {root} holds {PACKAGE} {version}, "
                                                         f"not {expected}")
    return PiRuntime(root, node, str(version))


def installed(version: str = VERSION) -> PiRuntime:
    """The installed runtime of the verified ``version`` whose tool semantics re-run the calls (tool replay needs
    Pi's own tools even without a continuation)."""
    from forkpoint.runtimes import find

    runtime = find("pi", version)
    if runtime is None:
        raise ReplayError(ErrorKind.CONFIGURATION, f"Pi {version} is not installed; run `forkpoint agents install "
                                                   f"pi@{version}` (Pi's own tools re-run the historical calls)")
    return from_entrypoint(runtime.entrypoint, version)
