"""Install and probe agents that ship on npm: the install is an npm prefix (see forkpoint.runtimes.base)."""

from __future__ import annotations

import json
import platform
import re
import shutil
import subprocess
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

from forkpoint.adapters.spec import NpmPackage
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process.reaper import die_with_parent_hook
from forkpoint.runtimes.base import PROBE_TIMEOUT_S, Runtime, cached_probe, now, record_probe, run_probe

INSTALL_TIMEOUT_S = 900.0


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


def _native_entrypoint(prefix: Path, spec: NpmPackage, package: dict[str, Any]) -> Path:
    """The native binary inside the installed per-platform optional dependency (see ``NpmPackage.run_native``)."""
    prefix_name, pattern = spec.native_package_prefix or "", spec.native_binary or ""
    optional = package.get("optionalDependencies") or {}
    names = sorted(n for n in optional if isinstance(n, str) and n.startswith(prefix_name))
    if not names:
        return _bundled_entrypoint(prefix / "node_modules" / spec.package, spec)
    installed = [prefix / "node_modules" / n for n in names if (prefix / "node_modules" / n / "package.json").is_file()]
    if len(installed) != 1:
        found = ", ".join(p.name for p in installed) or "none"
        raise ReplayError(ErrorKind.INTERNAL,
                          f"{spec.package}: expected one installed native package for {_platform_key()} "
                          f"among {', '.join(names) or 'no optionalDependencies'}; found {found}")
    matches = _glob_first(installed[0], (pattern, *spec.older_native_binaries))
    if len(matches) != 1:
        message = f"{spec.package}: expected one native binary {pattern} in {installed[0]}, found {len(matches)}"
        raise ReplayError(ErrorKind.INTERNAL, message)
    entry = matches[0]
    if not _is_native_binary(entry):
        raise ReplayError(ErrorKind.INTERNAL, f"{spec.package}: {entry} is not a native executable")
    entry.chmod(entry.stat().st_mode | 0o111)
    return entry


#: the Rust target triple of each platform key, as older packages name their bundled binaries
_TRIPLES = {"linux-x64": "x86_64-unknown-linux-musl", "linux-arm64": "aarch64-unknown-linux-musl",
            "linux-x64-musl": "x86_64-unknown-linux-musl", "linux-arm64-musl": "aarch64-unknown-linux-musl",
            "darwin-x64": "x86_64-apple-darwin", "darwin-arm64": "aarch64-apple-darwin"}


def _glob_first(directory: Path, patterns: tuple[str, ...]) -> list[Path]:
    """The files the first pattern with any match finds (none: [])."""
    for pattern in patterns:
        matches = sorted(p for p in directory.glob(pattern) if p.is_file())
        if matches:
            return matches
    return []


def _bundled_entrypoint(package_dir: Path, spec: NpmPackage) -> Path:
    """An older release with no per-platform packages, every platform's binary in the main package: Codex before
    0.4x as ``bin/<bin>-<target triple>``, 0.4x-0.98 in an ``older_native_binaries`` layout under the triple's
    folder (``vendor/<triple>/codex/codex``): this platform's, when it is a native executable."""
    triple = _TRIPLES.get(_platform_key())
    entry = package_dir / "bin" / f"{spec.bin_name}-{triple}"
    if triple is not None and not entry.exists():
        older = [p for p in _glob_first(package_dir, spec.older_native_binaries) if triple in p.parts]
        entry = older[0] if len(older) == 1 else entry
    if triple is None or entry.is_symlink() or not entry.is_file() or not _is_native_binary(entry):
        raise ReplayError(ErrorKind.INTERNAL,
                          f"{spec.package}: expected one installed native package for {_platform_key()} "
                          f"(no optionalDependencies, and no bundled bin/{spec.bin_name}-{triple or '?'})")
    entry.chmod(entry.stat().st_mode | 0o111)
    return entry


def entrypoint(prefix: Path, spec: NpmPackage) -> Path:
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
    if entry.is_symlink():
        entry = _materialised(prefix, spec, entry)
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


def _materialised(prefix: Path, spec: NpmPackage, entry: Path) -> Path:
    """A bin the package's postinstall replaced with a link to its platform binary (OpenCode 1.0.x and 1.1.x link
    it by ABSOLUTE path into the staging prefix, a link that dangles once the prefix is renamed into place: the
    release was 'not valid' after its install): the binary, copied in its place. Only a native executable inside
    the prefix is copied."""
    target = entry.resolve()
    if not target.is_relative_to(prefix.resolve()) or not target.is_file() or not _is_native_binary(target):
        raise ReplayError(ErrorKind.INTERNAL, f"{spec.package}: its bin {entry.name} links to {target}, not a native "
                                              "executable inside the install")
    entry.unlink()
    shutil.copy2(target, entry)
    return entry


def _node_wrapper(prefix: Path, spec: NpmPackage, script: Path) -> Path:
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


VIEW_TIMEOUT_S = 120.0


def lockstep_siblings(package: str, version: str, dependencies: Mapping[str, object],
                      published: Callable[[str], Collection[str]], undeclared: Collection[str] = ()) -> list[str]:
    """``name@version`` for each dependency of a release in its package's own npm scope that asks for a range
    of the release's own version (``^1.0.3`` of 1.0.3) and has that exact version published: the packages of a
    lockstep monorepo release, as they were published together. Left to the range, npm takes today's newest
    sibling (Pi 1.0.3's SDK then imports an export its 1.6.0 sibling removed, and forkpoint's runner cannot load
    it). ``undeclared``: same-scope siblings a release may import without declaring them
    (``NpmPackage.undeclared_siblings``), pinned likewise when that exact version is published.
    ``published(name)``: the versions the registry has of ``name``."""
    scope, _, _ = package.partition("/")
    if not package.startswith("@") or not scope:
        return []
    pins = []
    for name, wanted in sorted(dependencies.items()):
        if name == package or not name.startswith(f"{scope}/") or not isinstance(wanted, str) \
                or wanted.lstrip("^~=").strip() != version:
            continue
        if version in published(name):
            pins.append(f"{name}@{version}")
    for name in sorted(undeclared):
        if name != package and name.startswith(f"{scope}/") and name not in dependencies \
                and version in published(name):
            pins.append(f"{name}@{version}")
    return pins


def _view(spec: str, field: str) -> Any:
    """``npm view SPEC FIELD --json``, parsed; None when npm fails or answers nothing."""
    try:
        done = subprocess.run(["npm", "view", spec, field, "--json"], capture_output=True, text=True,
                              timeout=VIEW_TIMEOUT_S, check=False, preexec_fn=die_with_parent_hook())
        return json.loads(done.stdout) if done.returncode == 0 and done.stdout.strip() else None
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None


def _siblings(package: str, version: str, undeclared: Collection[str] = ()) -> list[str]:
    dependencies = _view(f"{package}@{version}", "dependencies")
    if not isinstance(dependencies, dict):
        return []

    def published(name: str) -> Collection[str]:
        versions = _view(name, "versions")
        return [v for v in versions if isinstance(v, str)] if isinstance(versions, list) else []

    return lockstep_siblings(package, version, dependencies, published, undeclared)


def install(agent: str, version: str, spec: NpmPackage, staging: Path, *, lockstep: bool = False) -> dict[str, str]:
    """``npm install`` the package (and its extra packages) into ``staging``; the manifest of the result.
    ``lockstep`` (a release installed for calibration): its same-scope siblings at its own version
    (:func:`lockstep_siblings`)."""
    siblings = _siblings(spec.package, version, spec.undeclared_siblings) if lockstep else []
    argv = ["npm", "install", "--prefix", str(staging), "--no-audit", "--no-fund",
            f"{spec.package}@{version}", *siblings, *spec.extra_packages]
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
    return Runtime(agent, version, staging, entrypoint(staging, spec), now()).manifest()


_VERSION_RE = re.compile(r"^\s*(?:codex-cli\s+|GitHub Copilot CLI\s+)?v?(\d+\.\d+\.\d+(?:[-+][0-9A-Za-z.\-]+)?)\b")


def parse_version_output(output: str) -> str:
    """``"2.1.220 (Claude Code)"`` / ``"codex-cli 0.149.0"`` / ``"GitHub Copilot CLI 1.0.102."`` -> the version;
    raises ValueError on anything else."""
    for line in output.splitlines():
        match = _VERSION_RE.match(line)
        if match:
            return match.group(1)
    raise ValueError(f"no version in {output.strip()[:200]!r}")


def probe_version(runtime: Runtime, spec: NpmPackage) -> str:
    """The version ``<entrypoint> --version`` reports; for an installed runtime, the answer of an earlier probe
    while its entrypoint and the package's package.json are the same files (no process at all)."""
    depends_on = [runtime.entrypoint, runtime.root / "node_modules" / spec.package / "package.json"]
    cached = cached_probe(runtime, depends_on)
    if cached is not None and cached == runtime.version:  # a mismatch (e.g. from an older probe env) is re-probed
        return cached
    try:
        done = run_probe([str(runtime.entrypoint), "--version"], PROBE_TIMEOUT_S, spec.probe_env)
        if done.returncode != 0:
            raise ValueError(f"exit {done.returncode}: {done.stderr.strip()[:500]}")
        # Pi 0.75 prints its --version on stderr (0.79 on stdout): read there only when stdout says nothing
        version = parse_version_output(done.stdout if done.stdout.strip() else done.stderr)
    except (OSError, subprocess.TimeoutExpired, ValueError) as error:
        message = f"{runtime.agent} {runtime.version}: `{runtime.entrypoint} --version` failed: {error}"
        raise ReplayError(ErrorKind.CONFIGURATION, message) from None
    record_probe(runtime, depends_on, version)
    return version
