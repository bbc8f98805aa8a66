"""``--image FILE``: an OCI image (layout directory or tarball) or a ``docker save`` / ``podman save`` tarball,
unpacked into a root file system for the sandbox, in pure Python, cached by the digest of its manifest.

Images come from strangers, so the archive is hostile input. Every layer member is checked before anything is
written for it, and the whole image is refused (nothing published in the cache) when one fails:

- its name must be relative and free of ``..`` (an absolute path or a climb out of the root is refused);
- it must not pass through a symlink or a non-directory already unpacked (a member written through a link);
- only directories, regular files, symlinks and hard links: device nodes, FIFOs and other types are refused;
- a symlink whose relative target climbs out of the root is refused; an absolute target is kept (images are full
  of them: ``/etc/alternatives/...``) — it resolves inside the image in the sandbox, and forkpoint never follows
  a link while unpacking; a hard link must name a regular file already unpacked in the root;
- a regular file's declared size counts against the image's total (``max_bytes``, 8 GiB by default) before any
  byte is written: a 10 GB (sparse) file is refused from its header; ``max_entries`` bounds the member count;
- OCI whiteouts apply in layer order: ``.wh.NAME`` removes NAME from the layers below, ``.wh..wh..opq`` empties its
  directory of them; set-uid/set-gid bits are dropped, ownership is not restored (the files are forkpoint's);
- OCI blobs (manifest, layers) are checked against their sha256 digest; JSON documents are read bounded.

The unpacked root is built in a private folder beside the cache entry and renamed into place when complete
(``$FORKPOINT_IMAGE_CACHE``, default ``~/.cache/forkpoint/images/<digest>/``), so a refused or interrupted unpack
leaves no half-made root behind for the next run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from forkpoint.core.errors import ErrorKind, ReplayError

CACHE_ENV = "FORKPOINT_IMAGE_CACHE"
DEFAULT_MAX_BYTES = 8 * 1024**3
DEFAULT_MAX_ENTRIES = 2_000_000
_MAX_JSON = 4 * 1024 * 1024
_CHUNK = 1024 * 1024
_DONE = "image.json"
_WHITEOUT = ".wh."
_OPAQUE = ".wh..wh..opq"


def refused(image: Path | str, why: str) -> ReplayError:
    return ReplayError(ErrorKind.WORKSPACE, f"--image {image}: {why}; nothing was unpacked", before_effect=True)


def cache_root() -> Path:
    override = os.environ.get(CACHE_ENV)
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "forkpoint" / "images"


@dataclass(frozen=True)
class Layer:
    name: str  # where it is in the image (for messages)
    digest: str | None  # "sha256:<hex>" when the format gives one (OCI); docker-save legacy layers have none


@dataclass(frozen=True)
class Unpacked:
    """A root file system ready for the sandbox, and what it came from (result metadata)."""

    root: Path
    digest: str
    env: dict[str, str] = field(default_factory=dict)  # the image config's Env
    metadata: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------- sources


class _Source:
    """Where the image's files are: an OCI layout directory or a tarball (OCI layout or docker-save)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self, name: str) -> IO[bytes]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def read_json(self, name: str) -> Any:
        with self.open(name) as handle:
            raw = handle.read(_MAX_JSON + 1)
        if len(raw) > _MAX_JSON:
            raise refused(self.path, f"{name} is larger than {_MAX_JSON} bytes")
        try:
            return json.loads(raw)
        except ValueError as error:
            raise refused(self.path, f"{name} is not JSON ({error})") from None

    def has(self, name: str) -> bool:
        try:
            self.open(name).close()
        except ReplayError:
            return False
        return True


class _DirSource(_Source):
    def open(self, name: str) -> IO[bytes]:
        if name.startswith("/") or ".." in name.split("/"):
            raise refused(self.path, f"the image names {name!r}, outside its folder")
        try:
            fd = os.open(self.path / name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as error:
            raise refused(self.path, f"cannot open {name}: {error.strerror}") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise refused(self.path, f"{name} is not a regular file")
        return os.fdopen(fd, "rb")


class _TarSource(_Source):
    def __init__(self, path: Path) -> None:
        super().__init__(path)
        try:
            self.tar = tarfile.open(path, "r:*")  # noqa: SIM115 (closed by close())
            self.members = {os.path.normpath(m.name.lstrip("/")): m for m in self.tar.getmembers() if m.isreg()}
        except (tarfile.TarError, OSError) as error:
            raise refused(path, f"not a readable tar archive ({error})") from None

    def open(self, name: str) -> IO[bytes]:
        member = self.members.get(os.path.normpath(name))
        handle = self.tar.extractfile(member) if member is not None else None
        if handle is None:
            raise refused(self.path, f"the archive has no regular file {name}")
        return handle

    def close(self) -> None:
        self.tar.close()


def _source(image: Path) -> _Source:
    try:
        mode = os.stat(image).st_mode
    except OSError as error:
        raise refused(image, error.strerror or "cannot stat") from None
    if stat.S_ISDIR(mode):
        return _DirSource(image)
    if stat.S_ISREG(mode):
        return _TarSource(image)
    raise refused(image, "neither a folder (OCI image layout) nor a tar archive")


def _blob_name(digest: object, image: Path) -> str:
    if not isinstance(digest, str) or not digest.startswith("sha256:") or len(digest) != 71 or not all(
            c in "0123456789abcdef" for c in digest[7:]):
        raise refused(image, f"unsupported or malformed blob digest {digest!r} (sha256 only)")
    return f"blobs/sha256/{digest[7:]}"


def _verified_json(source: _Source, digest: object) -> tuple[Any, str]:
    name = _blob_name(digest, source.path)
    with source.open(name) as handle:
        raw = handle.read(_MAX_JSON + 1)
    if len(raw) > _MAX_JSON:
        raise refused(source.path, f"{name} is larger than {_MAX_JSON} bytes")
    if "sha256:" + hashlib.sha256(raw).hexdigest() != digest:
        raise refused(source.path, f"{name} does not match its digest")
    return json.loads(raw), str(digest)


def _arch() -> str:
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _pick(manifests: object, image: Path) -> dict[str, Any]:
    if not isinstance(manifests, list) or not manifests:
        raise refused(image, "index.json lists no manifest")
    usable = [m for m in manifests if isinstance(m, dict)]
    for entry in usable:
        wanted = entry.get("platform")
        if not isinstance(wanted, dict) or (wanted.get("os") in (None, "linux")
                                            and wanted.get("architecture") in (None, _arch())):
            return entry
    raise refused(image, f"no manifest for linux/{_arch()}")


def _layers(source: _Source) -> tuple[list[Layer], str, dict[str, Any]]:
    """The image's layers (lowest first), the cache key (the manifest's digest) and its config document."""
    image = source.path
    if source.has("index.json"):
        entry = _pick(source.read_json("index.json").get("manifests"), image)
        for _ in range(3):  # an index of indexes (multi-platform): bounded
            document, digest = _verified_json(source, entry.get("digest"))
            if isinstance(document.get("manifests"), list):
                entry = _pick(document["manifests"], image)
                continue
            layers = document.get("layers")
            if not isinstance(layers, list):
                raise refused(image, f"manifest {digest} lists no layers")
            config: Any = {}
            if isinstance(document.get("config"), dict):
                with contextlib.suppress(ReplayError):
                    config, _ = _verified_json(source, document["config"].get("digest"))
            found = [Layer(_blob_name(layer.get("digest"), image), str(layer.get("digest")))
                     for layer in layers if isinstance(layer, dict)]
            return found, digest, config if isinstance(config, dict) else {}
        raise refused(image, "index.json nests too deeply")
    if source.has("manifest.json"):  # docker save (legacy layout): layers are paths in the archive
        with source.open("manifest.json") as handle:
            raw = handle.read(_MAX_JSON + 1)
        manifest = json.loads(raw) if len(raw) <= _MAX_JSON else None
        if not isinstance(manifest, list) or not manifest or not isinstance(manifest[0], dict):
            raise refused(image, "manifest.json is not a docker-save manifest")
        names = manifest[0].get("Layers")
        if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
            raise refused(image, "manifest.json lists no layers")
        config = {}
        if isinstance(manifest[0].get("Config"), str):
            with contextlib.suppress(ReplayError, ValueError):
                config = source.read_json(manifest[0]["Config"])
        digest = "sha256:" + hashlib.sha256(raw).hexdigest()
        return [Layer(name, None) for name in names], digest, config if isinstance(config, dict) else {}
    raise refused(image, "neither an OCI image layout (index.json) nor a docker-save archive (manifest.json)")


# ---------------------------------------------------------------------------------------------------- unpacking


class _Budget:
    def __init__(self, max_bytes: int, max_entries: int) -> None:
        self.bytes_left, self.entries_left = max_bytes, max_entries
        self.max_bytes = max_bytes
        self.files = 0


class _Hashing:
    """A read-through sha256 of a blob stream (the layer is checked against its digest once read)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.hash, self.size = raw, hashlib.sha256(), 0

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.hash.update(data)
        self.size += len(data)
        return data

    def drain(self) -> None:
        while self.read(_CHUNK):
            pass


def _parts(name: str, image: Path, what: str) -> list[str]:
    if name.startswith("/"):
        raise refused(image, f"{what} {name!r} is an absolute path")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise refused(image, f"{what} {name!r} contains '..'")
    return parts


def _remove(path: Path) -> None:
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(path)  # never follows a symlink inside (fd-based on Linux)
    else:
        path.unlink()


def _directory(root: Path, parts: list[str], image: Path, name: str) -> Path:
    """``root/parts``, each component a real directory (created when missing, never a link followed)."""
    path = root
    for part in parts:
        path = path / part
        try:
            mode = os.lstat(path).st_mode
        except FileNotFoundError:
            path.mkdir(mode=0o755)
            continue
        if not stat.S_ISDIR(mode):
            kind = "a symlink" if stat.S_ISLNK(mode) else "not a directory"
            raise refused(image, f"member {name!r} passes through {path.relative_to(root)}, which is {kind}")
    return path


def _apply(root: Path, tar: tarfile.TarFile, image: Path, budget: _Budget, modes: dict[Path, int]) -> None:
    """One layer onto ``root`` (see the module docstring for the rules)."""
    created: set[Path] = set()
    for member in tar:
        budget.entries_left -= 1
        if budget.entries_left < 0:
            raise refused(image, "too many entries")
        parts = _parts(member.name, image, "member")
        if not parts:
            continue
        base = parts[-1]
        if base.startswith(_WHITEOUT):
            parent = _directory(root, parts[:-1], image, member.name)
            if base == _OPAQUE:
                for child in list(parent.iterdir()):
                    if child not in created:
                        _remove(child)
            else:
                hidden = base[len(_WHITEOUT):]
                if hidden in ("", ".", ".."):
                    raise refused(image, f"whiteout {member.name!r} names no entry")
                _remove(parent / hidden)
            continue
        if not (member.isdir() or member.isreg() or member.issym() or member.islnk()):
            kind = "a device node" if member.isdev() and not member.isfifo() else (
                "a FIFO" if member.isfifo() else f"of tar type {member.type!r}")
            raise refused(image, f"member {member.name!r} is {kind}")
        if member.isreg() and member.size > budget.bytes_left:
            raise refused(image, f"member {member.name!r} declares {member.size} bytes: the image would exceed "
                                 f"the limit of {budget.max_bytes} bytes")
        parent = _directory(root, parts[:-1], image, member.name)
        path = parent / base
        created.add(path)
        if member.isdir():
            with contextlib.suppress(FileNotFoundError):
                if not stat.S_ISDIR(os.lstat(path).st_mode):
                    _remove(path)
            path.mkdir(mode=0o755, exist_ok=True)
            modes[path] = member.mode & 0o1777
            continue
        _remove(path)
        if member.issym():
            target = member.linkname
            if not target.startswith("/"):
                depth = len(parts) - 1
                for part in target.split("/"):
                    depth += -1 if part == ".." else (0 if part in ("", ".") else 1)
                    if depth < 0:
                        raise refused(image, f"symlink {member.name!r} -> {target!r} leads outside the image")
            os.symlink(target, path)
        elif member.islnk():
            link = _parts(member.linkname, image, f"hard link {member.name!r} ->")
            source = root.joinpath(*link)
            _directory(root, link[:-1], image, member.linkname)
            try:
                source_mode = os.lstat(source).st_mode
            except FileNotFoundError:
                raise refused(image, f"hard link {member.name!r} names {member.linkname!r}, not in the image") \
                    from None
            if not stat.S_ISREG(source_mode):
                raise refused(image, f"hard link {member.name!r} -> {member.linkname!r} is not a regular file")
            os.link(source, path, follow_symlinks=False)
        else:
            budget.bytes_left -= member.size
            budget.files += 1
            handle = tar.extractfile(member)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                left = member.size
                while left > 0 and handle is not None:
                    chunk = handle.read(min(_CHUNK, left))
                    if not chunk:
                        break
                    os.write(fd, chunk)
                    left -= len(chunk)
                os.fchmod(fd, member.mode & 0o1777)  # no set-uid / set-gid
            finally:
                os.close(fd)
        with contextlib.suppress(OSError):
            os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)


def _unpack(source: _Source, layers: list[Layer], root: Path, budget: _Budget) -> None:
    modes: dict[Path, int] = {}
    for layer in layers:
        with source.open(layer.name) as raw:
            stream = _Hashing(raw)
            try:
                with tarfile.open(fileobj=stream, mode="r|*") as tar:  # type: ignore[call-overload]
                    _apply(root, tar, source.path, budget, modes)
            except tarfile.TarError as error:
                raise refused(source.path, f"layer {layer.name} is not a readable tar stream ({error}; gzip, "
                                           "bzip2, xz or plain: zstd is not supported)") from None
            stream.drain()
        if layer.digest is not None and "sha256:" + stream.hash.hexdigest() != layer.digest:
            raise refused(source.path, f"layer {layer.name} does not match its digest")
    for path, mode in sorted(modes.items(), key=lambda item: -len(item[0].parts)):
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISDIR(os.lstat(path).st_mode):
                os.chmod(path, mode | 0o700)  # forkpoint must be able to remove its cache


def image_digest(image: Path | str) -> str:
    """The image's manifest digest (the unpack cache's key), from its JSON documents only: what the image holds,
    whichever path names it (batch job identity). Refuses (ReplayError) what ``unpack_image`` would refuse there."""
    source = _source(Path(os.path.abspath(image)))
    try:
        return _layers(source)[1]
    finally:
        source.close()


def unpack_image(image: Path, *, cache: Path | None = None, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_entries: int = DEFAULT_MAX_ENTRIES) -> Unpacked:
    """The image's root file system, unpacked once per manifest digest into ``cache`` (see the module docstring)."""
    image = Path(os.path.abspath(image))
    source = _source(image)
    try:
        layers, digest, config = _layers(source)
        env = _config_env(config)
        cache = cache or cache_root()
        entry = cache / digest.replace(":", "-")
        if not (entry / _DONE).is_file():
            cache.mkdir(parents=True, exist_ok=True, mode=0o700)
            build = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=cache))
            try:
                (build / "rootfs").mkdir(mode=0o755)
                budget = _Budget(max_bytes, max_entries)
                _unpack(source, layers, build / "rootfs", budget)
                facts = {"digest": digest, "source": str(image), "layers": len(layers), "env": env,
                         "bytes": max_bytes - budget.bytes_left, "files": budget.files}
                (build / _DONE).write_text(json.dumps(facts, indent=2), "utf-8")
                try:
                    build.rename(entry)
                except OSError:  # another run published the same image first
                    if not (entry / _DONE).is_file():
                        raise
            finally:
                if build.exists():
                    shutil.rmtree(build, ignore_errors=True)
        facts = json.loads((entry / _DONE).read_text("utf-8"))
        return Unpacked(entry / "rootfs", digest, env, {"image": str(image), "digest": digest,
                                                        "layers": facts.get("layers"), "bytes": facts.get("bytes"),
                                                        "cache": str(entry)})
    finally:
        source.close()


def _config_env(config: dict[str, Any]) -> dict[str, str]:
    inner = config.get("config")
    values = inner.get("Env") if isinstance(inner, dict) else None
    env: dict[str, str] = {}
    for item in values if isinstance(values, list) else []:
        if isinstance(item, str) and "=" in item:
            name, _, value = item.partition("=")
            env[name] = value
    return env
