"""Install, find and probe verified agent runtimes (real CLIs from npm, venvs from PyPI) in forkpoint's cache.

``base`` is the cache (layout, manifest, lookup, the install tail); ``npm`` and ``python`` install and probe one
kind of package each, as the agent's spec declares (``AgentSpec.runtime``). Neither imports this module, so the
package has no import cycle; they load only when an install or a probe needs them.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import replace
from pathlib import Path

from forkpoint.adapters.spec import NpmPackage, PythonPackage
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
           "continued_by", "find", "install", "install_release", "install_tool", "list_installed", "probe_entrypoint",
           "probe_version", "release_python", "resolve_entrypoint", "trial", "trial_release"]

#: (agent, verified version, release entrypoint) while a calibration runs a release in that version's place
_TRIAL: ContextVar[tuple[str, str, Path, str] | None] = ContextVar("forkpoint_runtime_trial", default=None)


@contextlib.contextmanager
def trial(agent: str, as_version: str, entrypoint: Path, release: str) -> Iterator[None]:
    """Within the block, ``resolve_entrypoint(agent, as_version)`` is the release at ``entrypoint`` (forkpoint
    agents calibrate: the release resumes a session rebuilt with ``as_version``'s profile, and the bridge gate of
    that profile judges its first request). Only the calibration code in this process sets it."""
    check_verified(agent, as_version)
    token = _TRIAL.set((agent, as_version, entrypoint, release))
    try:
        yield
    finally:
        _TRIAL.reset(token)


def trial_release(agent: str, entrypoint: Path) -> str | None:
    """The release version on trial for ``agent`` at ``entrypoint`` (an adapter that checks its runtime's package
    version accepts it, as its verified version, only within :func:`trial`)."""
    trying = _TRIAL.get()
    return trying[3] if trying is not None and trying[0] == agent and trying[2] == entrypoint else None


def install(agent: str, version: str) -> Runtime:
    """Install a verified ``agent@version`` from its registry (idempotent: an installed runtime is returned)."""
    check_verified(agent, version)
    return _install(agent, version)


def _install(agent: str, version: str,
             pin: Callable[[PythonPackage], PythonPackage] = lambda package: package, *,
             lockstep: bool = False) -> Runtime:
    """The installed runtime, else its install from the agent's registry (a Python package ``pin``-ned first; an
    npm release with its same-scope siblings at its own version when ``lockstep``)."""
    package = package_of(agent)
    existing = find(agent, version)
    if existing:
        return existing
    if isinstance(package, NpmPackage):
        from forkpoint.runtimes import npm

        return install_staged(agent, version,
                              lambda staging: npm.install(agent, version, package, staging, lockstep=lockstep))
    from forkpoint.runtimes import python

    pinned = pin(package)
    interpreter, uv = python.prerequisites(pinned, version)
    return install_staged(agent, version,
                          lambda staging: python.install(agent, version, pinned, staging, interpreter, uv))


def install_tool(name: str) -> Path:
    """Install a host tool an agent's own tools run (``AgentSpec.host_tools``; idempotent); the folder to put
    first on PATH. A host that cannot is a configuration error saying why."""
    if name != "fd":
        raise ReplayError(ErrorKind.CONFIGURATION, f"unknown host tool {name!r}")
    from forkpoint.runtimes import fd

    return fd.install_fd().bin_dir


def install_release(agent: str, version: str) -> Runtime:
    """Install any released ``agent@version``, verified or not, for ``forkpoint agents calibrate`` (the caller
    validated the version string: forkpoint.adapters.calibration.check_target). A Python release gets the
    interpreter of the verified version of its major line (``release_python``); an npm release gets its lockstep
    siblings at its own version (``npm.lockstep_siblings``)."""
    return _install(agent, version, lambda package: replace(
        package, python_for={**(package.python_for or {}), version: release_python(agent, version)}), lockstep=True)


def release_python(agent: str, version: str) -> str:
    """The Python a release of a PyPI agent is installed on: that of the newest verified version of the same
    major line (else the package default)."""
    from forkpoint.adapters import agent_spec
    from forkpoint.core.releases import number

    package = package_of(agent)
    assert not isinstance(package, NpmPackage)
    major = (number(version) or (0, 0, 0))[0]
    same = sorted((v for v in agent_spec(agent).versions if (number(v) or (-1, 0, 0))[0] == major),
                  key=lambda v: number(v) or (0, 0, 0))
    return package.python_version(same[-1]) if same else package.python


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
    trying = _TRIAL.get()
    if trying is not None and trying[:2] == (agent, recorded_version) and explicit is None:
        return LaunchTarget(trying[2], recorded_version)
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
