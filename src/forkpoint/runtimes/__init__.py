"""Install, find and probe verified agent runtimes (real CLIs from npm, venvs from PyPI) in forkpoint's cache.

``base`` is the cache (layout, manifest, lookup, the install tail); ``npm`` and ``python`` install and probe one
kind of package each, as the agent's spec declares (``AgentSpec.runtime``). Neither imports this module, so the
package has no import cycle; they load only when an install or a probe needs them.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from forkpoint.adapters.spec import NpmPackage
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import LaunchTarget, Trajectory
from forkpoint.runtimes.base import (
    MANIFEST_NAME,
    SCHEMA_VERSION,
    Runtime,
    cache_root,
    check_cross_version,
    check_verified,
    find,
    install_staged,
    list_installed,
    package_of,
)

__all__ = ["MANIFEST_NAME", "SCHEMA_VERSION", "Runtime", "cache_root", "check_cross_version", "check_verified",
           "continued_by", "find", "install", "install_release", "list_installed", "probe_entrypoint", "probe_version",
           "resolve_entrypoint"]


def install(agent: str, version: str) -> Runtime:
    """Install a verified ``agent@version`` from its registry (idempotent: an installed runtime is returned)."""
    check_verified(agent, version)
    package = package_of(agent)
    existing = find(agent, version)
    if existing:
        return existing
    if isinstance(package, NpmPackage):
        from forkpoint.runtimes import npm

        return install_staged(agent, version, lambda staging: npm.install(agent, version, package, staging))
    from forkpoint.runtimes import python

    interpreter, uv = python.prerequisites(package, version)
    return install_staged(agent, version,
                          lambda staging: python.install(agent, version, package, staging, interpreter, uv))


def install_release(agent: str, version: str) -> Runtime:
    """Install any released ``agent@version`` from npm, verified or not, for ``forkpoint agents calibrate`` (the
    caller validated the version string: forkpoint.adapters.calibration.check_target)."""
    package = package_of(agent)
    existing = find(agent, version)
    if existing:
        return existing
    if not isinstance(package, NpmPackage):
        raise ReplayError(ErrorKind.CONFIGURATION, f"calibrating {agent} is not supported (not an npm agent)")
    from forkpoint.runtimes import npm

    return install_staged(agent, version, lambda staging: npm.install(agent, version, package, staging))


def probe_version(runtime: Runtime) -> str:
    """The version an installed runtime reports (``--version`` of a CLI, the distribution's metadata in a venv)."""
    package = package_of(runtime.agent)
    if isinstance(package, NpmPackage):
        from forkpoint.runtimes import npm

        return npm.probe_version(runtime, package)
    from forkpoint.runtimes import python

    return python.probe_version(runtime, package)


def probe_entrypoint(agent: str, entrypoint: Path) -> str:
    """The version an explicit executable reports; it must be a regular executable file."""
    if not entrypoint.is_file() or not os.access(entrypoint, os.X_OK):
        raise ReplayError(ErrorKind.CONFIGURATION, f"agent entrypoint is not an executable file: {entrypoint}")
    return probe_version(Runtime(agent, "unknown", entrypoint.parent, entrypoint, ""))


def continued_by(trajectory: Trajectory, version: str | None) -> Trajectory:
    """The trajectory as the launch sees it when ``--agent-version`` asks for another verified version (a pair
    proven e2e, else refused): the runtime, the envelope profile and the gate are then that version's."""
    if version is None or version == trajectory.version:
        return trajectory
    check_cross_version(trajectory.agent, trajectory.version or "", version)
    return replace(trajectory, version=version)


def resolve_entrypoint(agent: str, recorded_version: str, explicit: Path | None) -> LaunchTarget:
    """The binary that continues a recording: the same verified version that wrote it.

    The envelope profile the bridge checks and the session format both belong to one version, so a
    recording is continued only by its own version (an explicit entrypoint is probed to prove it).
    """
    check_verified(agent, recorded_version)
    if explicit is not None:
        version = probe_entrypoint(agent, explicit)
        check_verified(agent, version)
        if version != recorded_version:
            raise ReplayError(
                ErrorKind.UNSUPPORTED_VERSION,
                f"{explicit} is {agent} {version}, but the trajectory was recorded by {recorded_version}; "
                "continue a recording with the version that wrote it",
            )
        return LaunchTarget(explicit, version)
    runtime = find(agent, recorded_version)
    if runtime is None:
        raise ReplayError(
            ErrorKind.CONFIGURATION,
            f"{agent} {recorded_version} is not installed; run `forkpoint agents install "
            f"{agent}@{recorded_version}` (or pass --agent-entrypoint)",
        )
    version = probe_version(runtime)
    if version != recorded_version:
        raise ReplayError(
            ErrorKind.UNSUPPORTED_VERSION,
            f"the installed {agent} runtime reports {version}, expected {recorded_version}; reinstall it",
        )
    return LaunchTarget(runtime.entrypoint, version)
