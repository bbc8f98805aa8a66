"""An fd >= 9 for Pi's ``find`` on hosts whose distribution ships an older one (Debian 12: fd-find 8.6).

Pi's find passes ``--no-require-git`` (fd 9+) and looks for ``<agent dir>/bin/fd``, then ``fd`` / ``fdfind`` on
PATH; offline it never downloads its own. No registry forkpoint reaches ships a static fd, but Debian's archive does
ship fd 10 for its next release (trixie), linked against that release's glibc (2.39+). So the fd runtime is three
Debian packages of that release — ``fd-find``, ``libc6``, ``libgcc-s1`` — fetched with the host's own apt (a private
apt configuration: the host's sources, lists and state are untouched; apt checks the release signature against the
host's Debian archive keyring), each .deb checked against the SHA256 of the signed Packages index, and only four
named regular files taken out of them: the fd binary, the loader, ``libc.so.6`` and ``libgcc_s.so.1``. ``bin/fd``
runs that fd through that loader (``ld.so --library-path``), so no host library is loaded and the binary is not
modified.

Layout: ``<cache_root>/.tools/fd/`` (next to forkpoint's own uv) holding ``bin/fd`` (the wrapper), ``libexec/fd``,
``lib/``, and ``forkpoint-tool.json`` (the packages, their versions and SHA256). An install fills a staging dir
and renames it into place, like the agent runtimes. Nothing else of a .deb is unpacked: no link, device, absolute or
``..`` path can reach the disk, and every member read is bounded.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import lzma
import os
import platform
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process.reaper import die_with_parent_hook
from forkpoint.runtimes.base import cache_root, now, stage_into, write_manifest

SCHEMA = "forkpoint.tool/v1"
MANIFEST = "forkpoint-tool.json"
#: the Debian release whose fd-find is >= 9 (10.2.0); its glibc comes with it
SUITE = "trixie"
MIN_MAJOR = 9
#: the keyring apt checks the release's signature with (Debian 12's debian-archive-keyring holds trixie's keys)
KEYRING = Path("/usr/share/keyrings/debian-archive-keyring.gpg")
#: Debian architecture, multiarch triplet and loader per machine
ARCHES = {"x86_64": ("amd64", "x86_64-linux-gnu", "ld-linux-x86-64.so.2"),
          "aarch64": ("arm64", "aarch64-linux-gnu", "ld-linux-aarch64.so.1")}
#: the largest .deb and the largest member taken out of one (fd-find is 1 MB, libc6 3 MB; fd 3.5 MB, libc 2 MB)
MAX_DEB_BYTES = 64 * 1024 * 1024
MAX_MEMBER_BYTES = 32 * 1024 * 1024
APT_TIMEOUT_S = 600.0
VERSION_TIMEOUT_S = 30.0


def unavailable(why: str) -> ReplayError:
    return ReplayError(ErrorKind.CONFIGURATION, f"fd >= {MIN_MAJOR} (for Pi's find) cannot be installed: {why}")


def tool_root() -> Path:
    return cache_root() / ".tools" / "fd"


@dataclass(frozen=True)
class FdRuntime:
    """An installed fd: ``bin_dir`` holds ``fd`` (put first on the agent's PATH); ``root`` is bound read-only into
    a sandbox."""

    root: Path
    version: str

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"


def find_fd() -> FdRuntime | None:
    """The installed fd runtime with a valid manifest and its files in place, else None (no process is started)."""
    root = tool_root()
    try:
        data = json.loads((root / MANIFEST).read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema_version") != SCHEMA or not isinstance(data.get("version"), str):
        return None
    arch = ARCHES.get(platform.machine())
    if arch is None or data.get("arch") != arch[0]:
        return None
    files = [root / "bin" / "fd", root / "libexec" / "fd", root / "lib" / arch[2]]
    if not all(f.is_file() and not f.is_symlink() and os.access(f, os.X_OK) for f in files):
        return None
    return FdRuntime(root, data["version"])


# --- the Debian archive format (pure: bytes in, bytes out) -------------------------------------------------------

def ar_members(raw: IO[bytes], limit: int) -> Iterator[tuple[str, bytes]]:
    """The members of an ``ar`` archive (a .deb), each read in full up to ``limit`` bytes (a larger one is refused)."""
    if raw.read(8) != b"!<arch>\n":
        raise ValueError("not an ar archive")
    while True:
        header = raw.read(60)
        if not header:
            return
        if len(header) != 60 or header[58:60] != b"`\n":
            raise ValueError("truncated or corrupt ar header")
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        try:
            size = int(header[48:58].decode("ascii").strip())
        except ValueError:
            raise ValueError(f"ar member {name!r} has no valid size") from None
        if size < 0 or size > limit:
            raise ValueError(f"ar member {name!r} declares {size} bytes (limit {limit})")
        data = raw.read(size)
        if len(data) != size:
            raise ValueError(f"ar member {name!r} is truncated")
        if size % 2:
            raw.read(1)
        yield name, data


def deb_files(deb: bytes, wanted: dict[str, str], limit: int = MAX_MEMBER_BYTES) -> dict[str, bytes]:
    """The regular files named by ``wanted`` (data.tar path -> a key) out of a .deb's data.tar.xz, keyed by the
    key. Nothing else is read out; a wanted path that is a link, a directory or a device, is missing, appears
    twice or is larger than ``limit`` is refused (ValueError)."""
    data = None
    for name, content in ar_members(io.BytesIO(deb), MAX_DEB_BYTES):
        if name.startswith("data.tar"):
            if name != "data.tar.xz":
                raise ValueError(f"unsupported data member {name!r} (only data.tar.xz)")
            data = content
    if data is None:
        raise ValueError("no data.tar.xz member")
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=lzma.LZMAFile(io.BytesIO(data)), mode="r|") as tar:
            for member in tar:
                path = os.path.normpath(member.name.removeprefix("./"))
                key = wanted.get(path)
                if key is None:
                    continue
                if not member.isreg():
                    raise ValueError(f"{path} is not a regular file in the package")
                if key in found:
                    raise ValueError(f"{path} appears twice in the package")
                if member.size > limit:
                    raise ValueError(f"{path} declares {member.size} bytes (limit {limit})")
                handle = tar.extractfile(member)
                content = handle.read(limit + 1) if handle is not None else b""
                if len(content) != member.size:
                    raise ValueError(f"{path} is truncated")
                found[key] = content
    except (tarfile.TarError, lzma.LZMAError, EOFError) as error:
        raise ValueError(f"corrupt data.tar.xz: {error}") from None
    missing = sorted(set(wanted.values()) - set(found))
    if missing:
        raise ValueError(f"the package has no {', '.join(missing)}")
    return found


def parse_record(text: str) -> dict[str, str]:
    """The first stanza of ``apt-cache show`` (field -> value; continuation lines dropped)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break
            continue
        if line[0] in " \t":
            continue
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip()] = value.strip()
    return fields


_POLICY_SOURCE = re.compile(r"^\s*-?\d+\s+(\S+)\s+(\S+)\s+\S+\s+Packages\s*$")


def debian_mirror(policy: str) -> str | None:
    """The URI of the host's Debian archive (not its security archive) from ``apt-cache policy``'s package files:
    the mirror this host is configured to reach."""
    lines = policy.splitlines()
    for index, line in enumerate(lines[:-1]):
        match = _POLICY_SOURCE.match(line)
        release = lines[index + 1].strip()
        if match and release.startswith("release ") and "o=Debian," in release and "l=Debian," in release:
            return match.group(1)
    return None


_FD_VERSION = re.compile(r"^fd(?:find)?\s+(\d+)\.(\d+)\.(\d+)\s*$")


def fd_version(output: str) -> str | None:
    """``fd 10.2.0`` / ``fdfind 10.2.0`` -> ``10.2.0`` when its major version is at least MIN_MAJOR."""
    match = _FD_VERSION.match(output.strip())
    return ".".join(match.groups()) if match and int(match.group(1)) >= MIN_MAJOR else None


def wrapper(loader: str) -> str:
    """``bin/fd``: the packaged fd through the packaged loader, only the packaged libraries (paths relative to
    the script, so the staged folder can be renamed into place; argv[0] stays ``fd``)."""
    return ('#!/bin/sh\nhere="${0%/*}/.."\n'
            f'exec "$here/lib/{loader}" --inhibit-cache --library-path "$here/lib" --argv0 fd '
            '"$here/libexec/fd" "$@"\n')


# --- the install -------------------------------------------------------------------------------------------------

def _run(argv: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=APT_TIMEOUT_S, check=False,
                              preexec_fn=die_with_parent_hook(), env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.TimeoutExpired) as error:
        raise unavailable(f"`{' '.join(argv[:2])}` failed: {error}") from None
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip()[-1500:]
        shown = " ".join(a for a in argv if a != "-o" and "::" not in a)
        raise unavailable(f"`{shown}` exited {done.returncode}: {tail}")
    return done.stdout


def install_fd() -> FdRuntime:
    """Install the fd runtime (idempotent: an installed one is returned); a clear configuration error when this
    host cannot (no apt, no Debian mirror configured, the archive unreachable, another architecture)."""
    existing = find_fd()
    if existing is not None:
        return existing
    arch = ARCHES.get(platform.machine())
    if platform.system() != "Linux" or arch is None:
        raise unavailable(f"only Linux on {', '.join(ARCHES)} is supported (this is {platform.system()} "
                          f"{platform.machine()})")
    if shutil.which("apt-get") is None or shutil.which("apt-cache") is None:
        raise unavailable("apt-get is not on PATH (the fd runtime is fetched from Debian's archive with apt); "
                          f"install an fd >= {MIN_MAJOR} on PATH instead")
    if not KEYRING.is_file():
        raise unavailable(f"{KEYRING} does not exist (install debian-archive-keyring)")
    mirror = os.environ.get("FORKPOINT_DEBIAN_MIRROR") or debian_mirror(_run(["apt-cache", "policy"], Path("/")))
    if not mirror:
        raise unavailable("apt has no Debian archive configured (set FORKPOINT_DEBIAN_MIRROR to a Debian mirror URI)")

    def fill(staging: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="forkpoint-fd-apt-") as scratch:
            manifest = _fill(staging, Path(scratch), mirror, arch)
        write_manifest(staging / MANIFEST, manifest)

    stage_into(tool_root(), ".fd.staging-", fill)
    installed = find_fd()
    if installed is None:
        raise ReplayError(ErrorKind.INTERNAL, "the fd runtime was installed but is not valid")
    return installed


def _fill(staging: Path, scratch: Path, mirror: str, arch: tuple[str, str, str]) -> dict[str, Any]:
    debian_arch, triplet, loader = arch
    lib = f"usr/lib/{triplet}"
    wanted = {"fd-find": {"usr/lib/cargo/bin/fd": "libexec/fd"},
              "libc6": {f"{lib}/{loader}": f"lib/{loader}", f"{lib}/libc.so.6": "lib/libc.so.6"},
              "libgcc-s1": {f"{lib}/libgcc_s.so.1": "lib/libgcc_s.so.1"}}
    for name in ("sources", "preferences", "lists/partial", "cache/archives/partial", "download"):
        (scratch / name).mkdir(parents=True)
    (scratch / "sources" / "fd.sources").write_text(
        f"Types: deb\nURIs: {mirror}\nSuites: {SUITE}\nComponents: main\nArchitectures: {debian_arch}\n"
        f"Signed-By: {KEYRING}\n", "utf-8")
    apt = ["-o", "Dir::Etc::sourcelist=-", "-o", f"Dir::Etc::sourceparts={scratch / 'sources'}",
           "-o", "Dir::Etc::preferences=/dev/null", "-o", f"Dir::Etc::preferencesparts={scratch / 'preferences'}",
           "-o", f"Dir::State::Lists={scratch / 'lists'}", "-o", f"Dir::Cache={scratch / 'cache'}",
           "-o", "Dir::State::status=/dev/null", "-o", "Debug::NoLocking=1", "-o", "Acquire::Languages=none",
           "-o", f"APT::Architecture={debian_arch}", "-o", "APT::Sandbox::User=root"]
    _run(["apt-get", *apt, "-q", "update"], scratch)
    download = scratch / "download"
    _run(["apt-get", *apt, "-q", "download", *wanted], download)
    packages: list[dict[str, str]] = []
    for package, members in wanted.items():
        record = parse_record(_run(["apt-cache", *apt, "show", "--no-all-versions", package], scratch))
        expected, version = record.get("SHA256", ""), record.get("Version", "")
        debs = sorted(download.glob(f"{package}_*_{debian_arch}.deb"))
        if len(debs) != 1 or not expected or not version:
            raise unavailable(f"apt did not download one {package} .deb with an index record ({len(debs)} found)")
        deb = debs[0]
        if deb.is_symlink() or not deb.is_file() or deb.stat().st_size > MAX_DEB_BYTES:
            raise unavailable(f"{deb.name} is not a regular file of at most {MAX_DEB_BYTES} bytes")
        content = deb.read_bytes()
        digest = hashlib.sha256(content).hexdigest()
        if digest != expected:
            raise unavailable(f"{deb.name}: SHA256 {digest} is not the Packages index's {expected}")
        try:
            files = deb_files(content, members)
        except ValueError as error:
            raise unavailable(f"{deb.name}: {error}") from None
        for relative, data in files.items():
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(0o755)
        packages.append({"package": package, "version": version, "sha256": digest, "file": record.get("Filename", "")})
    script = staging / "bin" / "fd"
    script.parent.mkdir()
    script.write_text(wrapper(loader), "utf-8")
    script.chmod(0o755)
    version = _probe(script)
    return {"schema_version": SCHEMA, "version": version, "arch": debian_arch, "suite": SUITE,
            "packages": packages, "installed_at": now()}


def _probe(script: Path) -> str:
    """``bin/fd --version`` must answer fd >= MIN_MAJOR (the loader and libraries work on this kernel)."""
    with contextlib.suppress(OSError, subprocess.TimeoutExpired):
        done = subprocess.run([str(script), "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
                              check=False, env={"PATH": "/usr/bin:/bin"}, preexec_fn=die_with_parent_hook())
        version = fd_version(done.stdout) if done.returncode == 0 else None
        if version is not None:
            return version
        raise unavailable(f"the unpacked fd does not run: `fd --version` exited {done.returncode}: "
                          f"{(done.stderr or done.stdout).strip()[-500:]}")
    raise unavailable("the unpacked fd could not be started")


@functools.cache
def path_fd(search_path: str) -> str | None:
    """An fd >= MIN_MAJOR that Pi would find on ``search_path`` itself (``fd``, then ``fdfind``: Pi's order), as
    the path it resolves to; None when there is none or the first one Pi would pick is older (Pi then runs it and
    find fails on ``--no-require-git``). Cached per PATH value: one ``--version`` per process."""
    for name in ("fd", "fdfind"):
        found = shutil.which(name, path=search_path)
        if found is None:
            continue
        try:
            done = subprocess.run([found, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S,
                                  check=False, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent_hook())
        except (OSError, subprocess.TimeoutExpired):
            return None
        return found if done.returncode == 0 and fd_version(done.stdout) else None
    return None
