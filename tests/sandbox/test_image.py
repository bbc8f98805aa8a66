"""Unpacking images (sandbox.image): hostile tarballs written here are refused with a clear error and nothing is
published in the cache; whiteouts apply in layer order; an unpacked image is reused by digest."""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.sandbox.image import unpack_image
from forkpoint.testing.images import entry, layer, oci_tarball

FILE = entry("etc/hello", data=b"hello\n")


def refusal(tmp_path: Path, layers: list[bytes]) -> str:
    image = oci_tarball(tmp_path / "image.tar", layers)
    cache = tmp_path / "cache"
    with pytest.raises(ReplayError) as caught:
        unpack_image(image, cache=cache)
    assert caught.value.kind is ErrorKind.WORKSPACE and caught.value.before_effect
    assert list(cache.iterdir()) == []  # nothing published, no half-made root left behind
    return caught.value.message


@pytest.mark.parametrize(("member", "why"), [
    (entry("../escape", data=b"x"), "contains '..'"),
    (entry("etc/../../escape", data=b"x"), "contains '..'"),
    (entry("/etc/absolute", data=b"x"), "is an absolute path"),
    (entry("etc/passwd-link", kind=tarfile.LNKTYPE, link="/etc/passwd"), "is an absolute path"),
    (entry("etc/up", kind=tarfile.SYMTYPE, link="../../../root"), "leads outside the image"),
    (entry("dev/null2", kind=tarfile.CHRTYPE), "is a device node"),
    (entry("dev/sda9", kind=tarfile.BLKTYPE), "is a device node"),
    (entry("run/pipe", kind=tarfile.FIFOTYPE), "is a FIFO"),
    (entry(".wh..."), "names no entry"),
    (entry("etc/.wh.."), "names no entry"),
])
def test_hostile_members_are_refused(tmp_path: Path, member: tuple[tarfile.TarInfo, bytes], why: str) -> None:
    message = refusal(tmp_path, [layer([FILE, member])])
    assert why in message and member[0].name in message


def test_a_member_written_through_an_absolute_symlink_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "host-target"
    target.mkdir()
    link = entry("etc/evil", kind=tarfile.SYMTYPE, link=str(target))  # absolute: fine in the image's own root
    message = refusal(tmp_path, [layer([FILE, link, entry("etc/evil/planted", data=b"pwned\n")])])
    assert "passes through etc/evil, which is a symlink" in message
    assert list(target.iterdir()) == []


def test_a_link_in_a_lower_layer_is_not_followed_by_a_higher_one(tmp_path: Path) -> None:
    target = tmp_path / "host-target"
    target.mkdir()
    lower = layer([entry("opt", kind=tarfile.SYMTYPE, link=str(target))])
    message = refusal(tmp_path, [lower, layer([entry("opt/planted", data=b"pwned\n")])])
    assert "passes through opt, which is a symlink" in message and list(target.iterdir()) == []


def test_a_10_gb_sparse_file_is_refused_by_its_declared_size(tmp_path: Path) -> None:
    if shutil.which("tar") is None:
        pytest.skip("GNU tar is needed to write a sparse member")
    source = tmp_path / "sparse"
    source.mkdir()
    with (source / "huge").open("wb") as handle:
        handle.truncate(10 * 1024**3)
    subprocess.run(["tar", "--sparse", "-C", str(source), "-cf", str(tmp_path / "layer.tar"), "huge"], check=True)
    raw = (tmp_path / "layer.tar").read_bytes()
    assert len(raw) < 1024 * 1024  # the archive is tiny: only the header says 10 GB
    message = refusal(tmp_path, [raw])
    assert "'huge' declares 10737418240 bytes" in message and "exceed the limit" in message


def test_whiteouts_apply_in_layer_order_and_the_root_is_cached(tmp_path: Path) -> None:
    lower = layer([entry("etc/", kind=tarfile.DIRTYPE, mode=0o755), FILE, entry("etc/gone", data=b"old\n"),
                   entry("var/lib/", kind=tarfile.DIRTYPE, mode=0o755), entry("var/lib/a", data=b"a\n"),
                   entry("etc/alternatives-link", kind=tarfile.SYMTYPE, link="/etc/hello"),
                   entry("etc/hard", kind=tarfile.LNKTYPE, link="etc/hello"),
                   entry("bin/tool", data=b"#!/bin/sh\n", mode=0o4755)])
    upper = layer([entry("etc/.wh.gone"), entry("var/lib/.wh..wh..opq"), entry("var/lib/b", data=b"b\n")])
    image = oci_tarball(tmp_path / "image.tar", [lower, upper])
    cache = tmp_path / "cache"
    unpacked = unpack_image(image, cache=cache)
    root = unpacked.root
    assert (root / "etc" / "hello").read_text() == "hello\n" and not (root / "etc" / "gone").exists()
    assert sorted(p.name for p in (root / "var" / "lib").iterdir()) == ["b"]
    assert (root / "etc" / "alternatives-link").readlink() == Path("/etc/hello")
    assert (root / "etc" / "hard").stat().st_ino == (root / "etc" / "hello").stat().st_ino
    assert (root / "bin" / "tool").stat().st_mode & 0o7777 == 0o755  # no set-uid from an image
    assert unpacked.env == {"PATH": "/usr/local/bin:/usr/bin:/bin"}
    again = unpack_image(image, cache=cache)
    assert again.root == root and [p.name for p in cache.iterdir()] == [unpacked.digest.replace(":", "-")]


def test_a_tampered_layer_does_not_match_its_digest(tmp_path: Path) -> None:
    image = oci_tarball(tmp_path / "image.tar", [layer([FILE])], gzipped=False)
    with tarfile.open(image) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}  # type: ignore[union-attr]
    blob = next(name for name, data in members.items() if name.startswith("blobs/") and b"hello" in data)
    members[blob] = members[blob].replace(b"hello\n", b"HELLO\n")
    tampered = tmp_path / "tampered.tar"
    with tarfile.open(tampered, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, __import__("io").BytesIO(data))
    cache = tmp_path / "cache"
    with pytest.raises(ReplayError) as caught:
        unpack_image(tampered, cache=cache)
    assert "does not match its digest" in caught.value.message and list(cache.iterdir()) == []


def test_a_docker_save_tarball_and_an_oci_layout_folder(tmp_path: Path) -> None:
    import io
    import json

    raw = layer([FILE, entry("usr/local/bin/tool", data=b"#!/bin/sh\n", mode=0o755)])
    saved = tmp_path / "saved.tar"
    config = json.dumps({"config": {"Env": ["PATH=/opt/conda/bin:/usr/bin", "LD_PRELOAD=/evil.so"]}}).encode()
    manifest = json.dumps([{"Config": "cfg.json", "RepoTags": ["x:latest"], "Layers": ["abc/layer.tar"]}]).encode()
    with tarfile.open(saved, "w") as tar:
        for name, data in (("manifest.json", manifest), ("cfg.json", config), ("abc/layer.tar", raw)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    unpacked = unpack_image(saved, cache=tmp_path / "cache")
    assert (unpacked.root / "etc" / "hello").read_text() == "hello\n"
    assert unpacked.env["PATH"] == "/opt/conda/bin:/usr/bin"
    layout = tmp_path / "layout"
    with tarfile.open(oci_tarball(tmp_path / "oci.tar", [raw])) as tar:
        tar.extractall(layout, filter="data")
    from_folder = unpack_image(layout, cache=tmp_path / "cache")
    assert (from_folder.root / "usr" / "local" / "bin" / "tool").stat().st_mode & 0o777 == 0o755
