"""The runtime cache: layout, manifest, lookup, and the one install tail every installer ends with.

Layout: ``<cache_root>/<agent>/<version>/`` holds one installed agent version plus a ``forkpoint-runtime.json``
manifest. An install fills a staging dir first and renames it into place, so a version directory with a valid
manifest is always a complete install. Which versions are verified comes from the agent's spec.

A version probe's answer is kept in the manifest (``probe``: the version and the identity of the files it depends
on), so a continuation runs no probe while the installed files are the probed ones: ``node`` loading a CLI bundle
took over 10 s on a loaded machine and failed continuations as configuration errors (issue 27). Probes that do run
get ``PROBE_TIMEOUT_S``.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forkpoint.adapters import AGENTS, agent_spec
from forkpoint.adapters.spec import AgentPackage
from forkpoint.core.errors import ErrorKind, ReplayError

MANIFEST_NAME = "forkpoint-runtime.json"
SCHEMA_VERSION = "forkpoint.runtime/v1"


@dataclass(frozen=True)
class Runtime:
    """One installed agent version. ``entrypoint`` is absolute; the manifest stores it relative to ``root``."""

    agent: str
    version: str
    root: Path
    entrypoint: Path
    installed_at: str

    def manifest(self) -> dict[str, str]:
        return {
            "schema_version": SCHEMA_VERSION,
            "agent": self.agent,
            "version": self.version,
            "entrypoint": self.entrypoint.relative_to(self.root).as_posix(),
            "installed_at": self.installed_at,
        }

    @classmethod
    def from_manifest(cls, root: Path, data: Any) -> Runtime:
        """Parse a manifest; raises ValueError when it is not a valid v1 manifest."""
        if not isinstance(data, dict) or data.get("schema_version") != SCHEMA_VERSION:
            raise ValueError("not a forkpoint.runtime/v1 manifest")
        fields = ("agent", "version", "entrypoint", "installed_at")
        if not all(isinstance(data.get(f), str) and data[f] for f in fields):
            raise ValueError(f"manifest needs string fields {', '.join(fields)}")
        rel = Path(data["entrypoint"])
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError("manifest entrypoint must be a relative path inside the runtime")
        return cls(data["agent"], data["version"], root, root / rel, data["installed_at"])


def cache_root() -> Path:
    """``$FORKPOINT_RUNTIMES`` or ``~/.cache/forkpoint/runtimes``."""
    env = os.environ.get("FORKPOINT_RUNTIMES")
    return Path(env) if env else Path.home() / ".cache" / "forkpoint" / "runtimes"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def package_of(agent: str) -> AgentPackage:
    """How an agent forkpoint can install ships (its spec's runtime package)."""
    package = agent_spec(agent).runtime if agent in AGENTS else None
    if package is None:
        supported = sorted(name for name in AGENTS if agent_spec(name).runtime is not None)
        raise ReplayError(ErrorKind.UNSUPPORTED_AGENT, f"unknown agent {agent!r}; supported: {', '.join(supported)}")
    return package


def check_verified(agent: str, version: str) -> None:
    """Refuse an agent version forkpoint has not verified."""
    package_of(agent)
    verified = tuple(agent_spec(agent).versions)
    if version not in verified:
        raise ReplayError(
            ErrorKind.UNSUPPORTED_VERSION,
            f"{agent} {version} is not a verified version; verified: {', '.join(verified) or 'none'}",
        )


def check_cross_version(agent: str, recorded: str, continuing: str) -> None:
    """Refuse continuing a recording of ``recorded`` with another version unless that pair was proven e2e."""
    spec = agent_spec(agent)
    if continuing != recorded and continuing not in spec.cross_versions.get(recorded, ()):
        pairs = spec.cross_version_pairs()
        measured = spec.refused_pairs.get(f"{recorded} -> {continuing}")
        raise ReplayError(
            ErrorKind.UNSUPPORTED_VERSION,
            f"continuing a {agent} {recorded} recording with {continuing} is not verified"
            f"{f' ({measured})' if measured else ''}; verified pairs: {', '.join(pairs) or 'none'}",
        )
    check_verified(agent, continuing)


def _read_runtime(directory: Path) -> Runtime | None:
    try:
        runtime = Runtime.from_manifest(directory, json.loads((directory / MANIFEST_NAME).read_text("utf-8")))
    except (OSError, ValueError):
        return None
    if not (runtime.entrypoint.is_file() and os.access(runtime.entrypoint, os.X_OK)):
        return None
    return runtime


def find(agent: str, version: str) -> Runtime | None:
    """The installed runtime for ``agent@version`` with a valid manifest, else None."""
    runtime = _read_runtime(cache_root() / agent / version)
    return runtime if runtime and (runtime.agent, runtime.version) == (agent, version) else None


def list_installed() -> list[Runtime]:
    """Every runtime in the cache with a valid manifest, sorted by agent and version: of the agents this forkpoint
    knows (a cache shared with another forkpoint may hold runtimes of agents it added)."""
    root = cache_root()
    found = []
    for directory in sorted(root.glob("*/*")) if root.is_dir() else []:
        runtime = _read_runtime(directory) if directory.parent.name in AGENTS else None
        if runtime and (runtime.agent, runtime.version) == (directory.parent.name, directory.name):
            found.append(runtime)
    return found


def stage_into(target: Path, prefix: str, fill: Callable[[Path], object],
               done: Callable[[], bool] | None = None) -> None:
    """Install ``target`` (an agent runtime or a cached host tool: uv, flake8, fd) so a partial install never looks
    complete: ``fill(staging)`` fills a fresh staging dir next to it (named ``prefix``...), which is then renamed
    into place, replacing an incomplete earlier install; when ``done()`` says a concurrent installer finished
    first, its copy is kept. The staging dir never outlives the call."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    try:
        fill(staging)
        if done is not None and done():
            return
        if target.exists():  # a previous, incomplete install
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def write_manifest(path: Path, manifest: dict[str, Any]) -> None:
    path.write_text(json.dumps(manifest, indent=2) + "\n", "utf-8")


def install_staged(agent: str, version: str, fill: Callable[[Path], dict[str, str]]) -> Runtime:
    """The one install tail: ``fill(staging)`` installs into a fresh staging dir and returns its manifest; the
    manifest is written and the staging dir renamed into place (stage_into)."""
    stage_into(cache_root() / agent / version, f".{version}.staging-",
               lambda staging: write_manifest(staging / MANIFEST_NAME, fill(staging)))
    runtime = find(agent, version)
    if runtime is None:
        raise ReplayError(ErrorKind.INTERNAL, f"{agent} {version}: install finished but the runtime is not valid")
    return runtime


#: A version probe's deadline: ``node`` loading a CLI bundle took over 10 s on a loaded 2-core machine (issue 27), and a
#: timed-out probe fails the run; a probe that answers at all answers well within this.
PROBE_TIMEOUT_S = 120.0


def _identity(paths: list[Path]) -> list[list[int] | None]:
    """What says a file is unchanged: (device, inode, size, mtime, ctime) of each path (links followed), or None."""
    found: list[list[int] | None] = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            found.append(None)
            continue
        found.append([info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns])
    return found


def _own_manifest(runtime: Runtime) -> dict[str, Any] | None:
    """The manifest of the installed runtime ``runtime`` is (same entrypoint), else None (an explicit binary)."""
    try:
        data = json.loads((runtime.root / MANIFEST_NAME).read_text("utf-8"))
        if Runtime.from_manifest(runtime.root, data).entrypoint != runtime.entrypoint:
            return None
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def cached_probe(runtime: Runtime, paths: list[Path]) -> str | None:
    """The version an earlier probe of this installed runtime found, if the files it depends on (``paths``: the
    entrypoint, the package's metadata) are the very same files (identity unchanged); else None: probe again."""
    data = _own_manifest(runtime)
    probe = data.get("probe") if data is not None else None
    if not isinstance(probe, dict) or not isinstance(probe.get("version"), str):
        return None
    identity = _identity(paths)
    if None in identity or probe.get("identity") != identity:
        return None
    return str(probe["version"])


def record_probe(runtime: Runtime, paths: list[Path], version: str) -> None:
    """Remember a probe's answer in the runtime's manifest (an atomic replace; best effort: a read-only cache just
    probes every time)."""
    data = _own_manifest(runtime)
    identity = _identity(paths)
    if data is None or None in identity:
        return
    data["probe"] = {"version": version, "identity": identity, "probed_at": now()}
    with contextlib.suppress(OSError):
        fd, temp = tempfile.mkstemp(prefix=f".{MANIFEST_NAME}.", dir=runtime.root)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(json.dumps(data, indent=2) + "\n")
            os.replace(temp, runtime.root / MANIFEST_NAME)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp)


def run_probe(argv: list[str], timeout_s: float, extra_env: tuple[tuple[str, str], ...] = ()) \
        -> subprocess.CompletedProcess[str]:
    """Run a runtime's version probe as a child of a run would be: supervised (nothing of it outlives the probe, a
    timed-out one included; bounded output and processes), the allowlisted environment and a private ``TMPDIR``
    removed afterwards (OpenCode's ``--version`` leaves an ``opencode`` folder in its TMPDIR). A probe that cannot
    start raises OSError, one past ``timeout_s`` ``subprocess.TimeoutExpired``."""
    from forkpoint.process import run_supervised
    from forkpoint.process.childenv import private_temp_dir
    from forkpoint.process.environment import sanitized_env

    with private_temp_dir("fp-probe-") as temp_dir:
        env = {**sanitized_env(os.environ, strip_credentials=True), "TMPDIR": str(temp_dir), **dict(extra_env)}
        try:
            result = run_supervised(argv, cwd=Path.cwd(), env=env, timeout_s=timeout_s, die_with_parent=True,
                                    max_output_bytes=1024 * 1024)
        except ReplayError as error:
            raise OSError(error.message) from None
    if result.timed_out:
        raise subprocess.TimeoutExpired(argv, timeout_s)
    returncode = -1 if result.returncode is None else result.returncode
    return subprocess.CompletedProcess(argv, returncode, result.stdout.decode("utf-8", "replace"),
                                       result.stderr.decode("utf-8", "replace"))
