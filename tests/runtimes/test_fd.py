"""forkpoint's fd runtime: what a .deb may put on disk (four named regular files, nothing else), the archive the host's
apt reaches, the runnable result, and the refusals a host that cannot install it gets."""

from __future__ import annotations

import http.server
import io
import lzma
import shutil
import subprocess
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpoint.core.errors import ReplayError
from forkpoint.runtimes import fd


def _tar(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return lzma.compress(raw.getvalue())


def _deb(data: bytes, data_name: str = "data.tar.xz") -> bytes:
    """A .deb as dpkg-deb builds one: an ar archive of debian-binary, control.tar.xz and the data tarball."""
    out = io.BytesIO()
    out.write(b"!<arch>\n")
    for name, content in (("debian-binary", b"2.0\n"), ("control.tar.xz", _tar([])), (data_name, data)):
        out.write(f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(content):<10}`\n".encode())
        out.write(content + (b"\n" if len(content) % 2 else b""))
    return out.getvalue()


def _file(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.mode = 0o755
    return info


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


WANTED = {"usr/lib/cargo/bin/fd": "libexec/fd"}


def test_only_the_named_regular_files_leave_the_package() -> None:
    """Absolute, ``..`` and link members around the wanted file are never read out: the result holds the one
    named file's bytes, whatever else the archive carries."""
    deb = _deb(_tar([(_file("/etc/evil"), b"absolute"), (_file("../../escape"), b"dotdot"),
                     (_link("./usr/bin/fdfind", "../lib/cargo/bin/fd"), b""),
                     (_link("./usr/lib/cargo/bin/other", "/etc/passwd"), b""),
                     (_file("./usr/lib/cargo/bin/fd"), b"\x7fELF the binary")]))
    assert fd.deb_files(deb, WANTED) == {"libexec/fd": b"\x7fELF the binary"}


@pytest.mark.parametrize(("members", "why"), [
    ([(_link("./usr/lib/cargo/bin/fd", "/etc/passwd"), b"")], "not a regular file"),
    ([(_link("./usr/lib/cargo/bin/fd", "./usr/bin/x", tarfile.LNKTYPE), b"")], "not a regular file"),
    ([(_file("./usr/lib/cargo/bin/fd"), b"a"), (_file("usr/lib/cargo/bin/fd"), b"b")], "appears twice"),
    ([(_file("./usr/lib/cargo/bin/fd"), b"x" * 2048)], "declares 2048 bytes"),
    ([(_file("./usr/bin/fdfind"), b"x")], "has no libexec/fd"),
])
def test_a_hostile_package_is_refused(members: list[tuple[tarfile.TarInfo, bytes]], why: str) -> None:
    with pytest.raises(ValueError, match=why):
        fd.deb_files(_deb(_tar(members)), WANTED, limit=1024)


def test_a_package_that_is_not_what_it_claims_is_refused() -> None:
    with pytest.raises(ValueError, match="not an ar archive"):
        fd.deb_files(b"PK\x03\x04 a zip", WANTED)
    with pytest.raises(ValueError, match=r"only data\.tar\.xz"):
        fd.deb_files(_deb(b"zstd bytes", "data.tar.zst"), WANTED)
    with pytest.raises(ValueError, match=r"corrupt data\.tar\.xz"):
        fd.deb_files(_deb(b"not xz at all"), WANTED)
    huge = b"!<arch>\n" + f"{'data.tar.xz':<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{9999999999:<10}`\n".encode()
    with pytest.raises(ValueError, match="declares 9999999999 bytes"):
        fd.deb_files(huge, WANTED)


def test_the_debian_mirror_is_the_hosts_own_not_its_security_archive() -> None:
    policy = """Package files:
 100 /var/lib/dpkg/status
     release a=now
 500 http://mirror.example/debian-security bookworm-security/main amd64 Packages
     release v=12,o=Debian,a=oldstable-security,n=bookworm-security,l=Debian-Security,c=main,b=amd64
 500 http://archive.example/nodesource nodistro/main amd64 Packages
     release o=Node Source,n=nodistro,l=Node Source,c=main,b=amd64
 500 http://mirror.example/debian bookworm/main amd64 Packages
     release v=12.15,o=Debian,a=oldstable,n=bookworm,l=Debian,c=main,b=amd64
"""
    assert fd.debian_mirror(policy) == "http://mirror.example/debian"
    assert fd.debian_mirror(policy.replace("o=Debian,a=oldstable,", "o=Other,a=oldstable,")) is None


def test_only_fd_9_or_later_counts() -> None:
    assert fd.fd_version("fdfind 10.2.0\n") == "10.2.0" and fd.fd_version("fd 9.0.0") == "9.0.0"
    assert fd.fd_version("fdfind 8.6.0") is None and fd.fd_version("fd: command not found") is None


@pytest.mark.skipif(fd.find_fd() is None, reason="forkpoint's fd runtime is not installed")
def test_the_installed_fd_runs_through_its_own_loader(tmp_path: Path) -> None:
    """Debian 12's glibc is too old for trixie's fd: it runs only through the packaged loader and libraries, with
    the flag Pi's find passes."""
    runtime = fd.find_fd()
    assert runtime is not None
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("")
    (tmp_path / "a.py").write_text("")
    done = subprocess.run([str(runtime.bin_dir / "fd"), "--color=never", "--hidden", "--no-require-git", "--glob",
                           "--", "*.py", str(tmp_path)], capture_output=True, text=True, timeout=60, check=True,
                          env={"PATH": "/usr/bin:/bin"})
    assert done.stdout.splitlines() == [f"{tmp_path}/a.py", f"{tmp_path}/sub/b.py"]
    assert fd.fd_version(subprocess.run([str(runtime.bin_dir / "fd"), "--version"], capture_output=True, text=True,
                                        timeout=60, check=True).stdout)


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FORKPOINT_RUNTIMES", str(tmp_path / "runtimes"))
    return tmp_path / "runtimes"


def test_a_host_without_apt_is_told_why(empty_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(empty_cache))
    with pytest.raises(ReplayError, match="apt-get is not on PATH") as caught:
        fd.install_fd()
    assert caught.value.kind.category == "configuration_error"
    assert not (empty_cache / "tools" / "fd").exists()


@pytest.fixture
def hostile_mirror() -> Iterator[str]:
    """A loopback 'mirror' serving an unsigned InRelease (and nothing else)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.endswith("/InRelease"):
                body = b"Origin: Debian\nSuite: trixie\nCodename: trixie\nSHA256:\n"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            else:
                self.send_error(404)

        def log_message(self, *args: object) -> None:
            return None

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/debian"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.mark.skipif(shutil.which("apt-get") is None or not fd.KEYRING.is_file(), reason="needs apt and the keyring")
def test_an_unsigned_archive_is_refused_and_nothing_is_installed(empty_cache: Path, hostile_mirror: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """apt checks the release's signature against the Debian keyring: a mirror serving an unsigned index is an
    install failure naming apt's refusal, and no runtime appears."""
    monkeypatch.setenv("FORKPOINT_DEBIAN_MIRROR", hostile_mirror)
    with pytest.raises(ReplayError, match="cannot be installed: `apt-get -q update` exited") as caught:
        fd.install_fd()
    assert "is not signed" in caught.value.message
    assert fd.find_fd() is None
    assert [p.name for p in (empty_cache / ".tools").iterdir()] == []  # the staging dir is gone
