"""Small OCI images written by the tests themselves: layers as tar bytes, packed into an OCI image layout tarball.

``oci_tarball(path, [layer, ...])`` writes ``oci-layout``, ``index.json``, the manifest, a config (with ``Env``)
and the layer blobs, every blob named by its sha256, with fixed timestamps: the same layers give the same
digest, so an unpacked image stays cached between test runs. ``layer(entries)`` builds one layer from
``(TarInfo, data)`` pairs; ``busybox_root`` a minimal root from Debian's busybox package in apt's cache (or the
host's ``/bin/sh``), its shared libraries copied in as ``ldd`` lists them.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterable
from pathlib import Path

MTIME = 1_700_000_000
APPLETS = ("sh", "cat", "ls", "echo", "wc", "seq", "sed", "pwd", "mkdir", "rm", "grep", "env", "sleep", "true",
           "setsid", "nc")  # the last two: the held-out checks' detached process and connect attempts


def entry(name: str, *, data: bytes = b"", kind: bytes = tarfile.REGTYPE, mode: int = 0o644,
          link: str = "") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.mtime, info.linkname = kind, mode, MTIME, link
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    return info, data


def layer(entries: Iterable[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    """One uncompressed layer tarball."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


def tree_layer(root: Path) -> bytes:
    """A layer of everything under ``root`` (sorted, fixed owner and timestamps)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(root.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mtime = MTIME
            if info.isreg():
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def oci_tarball(path: Path, layers: list[bytes], *, env: list[str] | None = None, gzipped: bool = True) -> Path:
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict[str, object]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    descriptors = []
    for raw in layers:
        data = gzip.compress(raw, mtime=0) if gzipped else raw
        kind = "application/vnd.oci.image.layer.v1.tar" + ("+gzip" if gzipped else "")
        descriptors.append({"mediaType": kind, **blob(data)})
    config = {"architecture": "amd64", "os": "linux",
              "config": {"Env": env or ["PATH=/usr/local/bin:/usr/bin:/bin"]},
              "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(r).hexdigest() for r in layers]}}
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                           **blob(json.dumps(config).encode())},
                "layers": descriptors}
    index = {"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                                                **blob(json.dumps(manifest).encode())}]}
    with tarfile.open(path, "w") as tar:
        files = {"oci-layout": b'{"imageLayoutVersion": "1.0.0"}', "index.json": json.dumps(index).encode(),
                 **{f"blobs/sha256/{digest[7:]}": data for digest, data in blobs.items()}}
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), MTIME
            tar.addfile(info, io.BytesIO(data))
    return path


def _busybox() -> Path | None:
    """Debian's busybox binary from a .deb in apt's cache (``dpkg-deb -x``), unpacked into a temp folder."""
    archives = sorted(Path("/var/cache/apt/archives").glob("busybox_*.deb"))
    if not archives or shutil.which("dpkg-deb") is None:
        return None
    return archives[-1]


def busybox_root(root: Path) -> str:
    """A minimal root file system in ``root``: busybox (or the host's /bin/sh) with its applets and libraries.
    Returns where the shell came from."""
    (root / "bin").mkdir(parents=True)
    deb = _busybox()
    if deb is not None:
        unpacked = root.parent / (root.name + ".deb")
        subprocess.run(["dpkg-deb", "-x", str(deb), str(unpacked)], check=True)
        shutil.copy2(unpacked / "bin" / "busybox", root / "bin" / "busybox")
        shutil.rmtree(unpacked)
        for applet in APPLETS:
            os.symlink("busybox", root / "bin" / applet)
        origin = deb.name
    else:
        shutil.copy2(os.path.realpath("/bin/sh"), root / "bin" / "sh")
        origin = os.path.realpath("/bin/sh")
    copy_libraries(root, root / "bin" / ("busybox" if deb is not None else "sh"))
    return origin


def copy_libraries(root: Path, program: Path) -> None:
    """The shared libraries ``ldd`` lists for ``program`` (and its loader), copied to the same paths in ``root``."""
    listed = subprocess.run(["ldd", str(program)], capture_output=True, text=True, check=False).stdout
    for library in re.findall(r"(/\S+\.so[.\d]*)", listed):
        target = root / library.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(library), target)


def host_programs_root(root: Path, programs: Iterable[str]) -> None:
    """A root holding these host programs (``/bin/bash``, ...) at their paths, with their libraries."""
    for program in programs:
        target = root / program.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(os.path.realpath(program), target)
        copy_libraries(root, target)
