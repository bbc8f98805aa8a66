"""--sandbox bwrap with the real bubblewrap: placement at the recorded path, read-only system, hidden homes,
private /tmp, no network during tool replay, nothing left running, and the refusals."""

from __future__ import annotations

import os
import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.process import ProcessResult
from forkpoint.sandbox import open_sandbox
from forkpoint.sandbox.bwrap import BwrapSandbox

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None,
                                reason="bubblewrap is not installed (.ci/run installs it)")

RECORDED = "/tmp/forkpoint-rec/sandbox-test"
ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "ws"
    path.mkdir(parents=True)
    (path / "notes.txt").write_text("hello\n")
    return path


def sh(sandbox: BwrapSandbox, script: str, *, cwd: str | None = None, **options: object) -> ProcessResult:
    return sandbox.run(["/bin/sh", "-c", script], cwd=cwd or sandbox.cwd, env=ENV, timeout_s=30, merge_stderr=True,
                       **options)  # type: ignore[arg-type]


def text(result: ProcessResult) -> str:
    return result.stdout.decode()


def test_the_workspace_is_at_the_recorded_path(workspace: Path) -> None:
    sandbox = BwrapSandbox(workspace, RECORDED)
    result = sh(sandbox, f"pwd; pwd -P; cat {RECORDED}/notes.txt; echo new > {RECORDED}/made.txt")
    assert result.returncode == 0, text(result)
    assert text(result) == f"{RECORDED}\n{RECORDED}\nhello\n"
    assert (workspace / "made.txt").read_text() == "new\n"  # the workspace itself is read-write
    assert sandbox.host_path(f"{RECORDED}/made.txt") == str(workspace / "made.txt")
    assert sandbox.host_path("/etc/hostname") == "/etc/hostname"


def _mount_points(mountinfo: str) -> set[str]:
    return {line.split()[4] for line in mountinfo.splitlines() if len(line.split()) > 4}


def test_a_recorded_cwd_in_a_hidden_dir_costs_no_mount_per_top_level_entry(workspace: Path) -> None:
    """Issue 33: each mount is paid on every command; where the host's root can simply be bound read-only (the
    recorded cwd lies in the private /tmp), the top-level directories are not bound one by one."""
    host = _mount_points(Path("/proc/self/mountinfo").read_text())
    plain = sorted(path for entry in os.scandir("/") if entry.is_dir(follow_symlinks=False)
                   and (path := "/" + entry.name) not in host and path not in ("/tmp", "/home", "/root"))
    assert plain  # /usr, /etc, ... on any usual host
    sandbox = BwrapSandbox(workspace, RECORDED)
    result = sh(sandbox, "touch /etc/x 2>/dev/null || echo root-read-only; cat /proc/self/mountinfo")
    assert result.returncode == 0 and text(result).startswith("root-read-only\n"), text(result)
    inside = _mount_points(text(result).partition("\n")[2])
    assert {RECORDED, "/tmp", "/proc", "/dev"} <= inside
    assert inside.isdisjoint(plain)


def test_a_recorded_cwd_that_exists_here_outside_the_hidden_dirs(workspace: Path) -> None:
    """The one-bind root (issue 33) with the workspace mounted over an existing host directory (its mount point
    already exists in the read-only root); the host's directory is untouched."""
    recorded = next((path for path in ("/mnt", "/srv", "/opt") if os.path.isdir(path)
                     and not os.path.islink(path)), None)
    if recorded is None:
        pytest.skip("no /mnt, /srv or /opt on this host")
    before = sorted(os.listdir(recorded))
    sandbox = BwrapSandbox(workspace, recorded)
    result = sh(sandbox, "pwd -P; cat notes.txt; echo made > made.txt; touch /etc/x 2>/dev/null || echo read-only")
    assert text(result) == f"{recorded}\nhello\nread-only\n", text(result)
    assert (workspace / "made.txt").read_text() == "made\n"
    assert sorted(os.listdir(recorded)) == before


@pytest.mark.parametrize("parent", ["/", "/var"])
def test_a_recorded_cwd_whose_parents_do_not_exist_here(workspace: Path, parent: str) -> None:
    """/testbed or /Users/alice/proj style recordings: the missing directories are created in a read-only skeleton."""
    recorded = os.path.join(parent, f"forkpoint-absent-{uuid.uuid4().hex[:8]}", "app")
    sandbox = BwrapSandbox(workspace, recorded)
    result = sh(sandbox, f"pwd -P; cat notes.txt; ls {parent} >/dev/null && echo listed; "
                         f"touch {os.path.dirname(recorded)}/x 2>/dev/null || echo parent-read-only; "
                         f"touch {parent.rstrip('/')}/y 2>/dev/null || echo skeleton-read-only")
    assert result.returncode == 0, text(result)
    assert text(result) == f"{recorded}\nhello\nlisted\nparent-read-only\nskeleton-read-only\n"
    assert not os.path.exists(os.path.dirname(recorded))  # nothing was created on the host


def test_outside_the_binds_is_read_only_or_hidden(workspace: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    real_home = tmp_path / "real-home"
    (real_home / ".ssh").mkdir(parents=True)
    (real_home / ".ssh" / "id_secret").write_text("SECRET\n")
    monkeypatch.setenv("HOME", str(real_home))
    host_tmp = tmp_path / "host-tmp-file"
    host_tmp.write_text("host\n")
    sandbox = BwrapSandbox(workspace, RECORDED)
    checks = {
        "home-secret": f"cat {real_home}/.ssh/id_secret",
        "home-write": f"touch {real_home}/planted",
        "root-home": "ls -A /root | grep -q .",
        "host-tmp": f"cat {host_tmp}",
        "host-workspace-path": f"cat {workspace}/notes.txt",
        "usr-write": "touch /usr/planted",
        "etc-write": "touch /etc/planted",
        "root-write": "touch /planted",
        "remount": "mount -o remount,rw / 2>/dev/null",
    }
    for name, command in checks.items():
        result = sh(sandbox, command)
        assert result.returncode != 0, f"{name}: {text(result)}"
    private = sh(sandbox, "echo private > /tmp/inside && cat /tmp/inside && ls /tmp")
    assert private.returncode == 0 and text(private).startswith("private\n")
    assert not Path("/tmp/inside").exists()
    assert not (real_home / "planted").exists() and not Path("/usr/planted").exists()


def test_the_real_home_is_hidden_when_outside_tmp(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = Path("/var/lib") if Path("/var/lib").is_dir() else None
    if home is None:
        pytest.skip("no /var/lib on this host")
    monkeypatch.setenv("HOME", "/var/lib")
    sandbox = BwrapSandbox(workspace, RECORDED)
    assert "/var/lib" in sandbox.hidden
    result = sh(sandbox, "ls -A /var/lib | wc -l; ls /var >/dev/null && echo var-visible")
    assert text(result) == "0\nvar-visible\n"


def test_writable_and_readable_extras(workspace: Path, tmp_path: Path) -> None:
    home = tmp_path / "state" / "run" / "home"
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "tool").write_text("runtime file\n")
    sandbox = BwrapSandbox(workspace, RECORDED)
    result = sh(sandbox, f"echo cfg > {home}/.config && cat {runtime}/tool && touch {runtime}/x 2>/dev/null || "
                         "echo runtime-read-only", writable=(home,), readable=(runtime,))
    assert text(result) == "runtime file\nruntime-read-only\n"
    assert (home / ".config").read_text() == "cfg\n"


@pytest.fixture
def listener() -> Iterator[int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    try:
        yield server.getsockname()[1]
    finally:
        server.close()


def test_no_network_during_tool_replay(workspace: Path, listener: int) -> None:
    sandbox = BwrapSandbox(workspace, RECORDED)
    connect = f"import socket; socket.create_connection(('127.0.0.1', {listener}), timeout=5); print('connected')"
    offline = sandbox.run(["python3", "-c", connect], cwd=RECORDED, env=ENV, timeout_s=30, merge_stderr=True)
    assert offline.returncode != 0 and b"ConnectionRefusedError" in offline.stdout
    online = sandbox.run(["python3", "-c", connect], cwd=RECORDED, env=ENV, timeout_s=30, network=True)
    assert online.returncode == 0 and online.stdout == b"connected\n"


def test_nothing_survives_the_command(workspace: Path) -> None:
    marker = f"forkpoint-bwrap-{uuid.uuid4().hex}"
    sandbox = BwrapSandbox(workspace, RECORDED)
    result = sandbox.run(["/bin/sh", "-c", "setsid sleep 300 & nohup sleep 301 >/dev/null 2>&1 & echo $$"],
                         cwd=RECORDED, env={**ENV, "MARKER": marker}, timeout_s=30)
    assert result.returncode == 0
    assert text(result) == "1\n" or int(text(result)) < 10  # its own pid namespace
    survivors = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                environ = (proc / "environ").read_bytes()
            except OSError:
                continue
            if f"MARKER={marker}".encode() in environ.split(b"\0"):
                survivors.append(proc.name)
    assert survivors == []


@pytest.mark.parametrize("recorded", ["/", "/usr", "/proc/self", "relative/dir"])
def test_recorded_cwds_that_would_hide_the_system_are_refused(workspace: Path, recorded: str) -> None:
    with pytest.raises(ReplayError) as caught:
        BwrapSandbox(workspace, recorded)
    assert caught.value.kind is ErrorKind.WORKSPACE


def test_path_map_is_refused_with_bwrap(workspace: Path) -> None:
    with pytest.raises(ReplayError) as caught:
        open_sandbox("bwrap", workspace, RECORDED, [f"{RECORDED}={workspace}"])
    assert caught.value.kind is ErrorKind.CONFIGURATION and "--sandbox local" in caught.value.message


def test_missing_bwrap_is_a_clear_configuration_error(workspace: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "no-bwrap-here"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(ReplayError) as caught:
        open_sandbox("bwrap", workspace, RECORDED)
    assert caught.value.kind is ErrorKind.CONFIGURATION
    assert "apt-get install bubblewrap" in caught.value.message


def test_a_fork_storm_inside_bwrap_stops_at_the_limit(workspace: Path) -> None:
    """The pids cgroup holds bwrap, its pid namespace's init and everything forked inside: the storm gets fewer
    children than the limit, and none of them survives."""
    import sys

    from tests.process.test_limits import STORM

    from forkpoint.process import limits

    if limits._hierarchy_now().path is None:
        pytest.skip(f"no pids cgroup on this host: {limits._hierarchy_now().reason}")
    (workspace / "storm.py").write_text(STORM)
    marker = f"forkpoint-bwrap-storm-{uuid.uuid4().hex}"
    sandbox = BwrapSandbox(workspace, RECORDED)
    result = sandbox.run([sys.executable, "storm.py", "pids.txt"], cwd=RECORDED, env={**ENV, "MARKER": marker},
                         timeout_s=60, max_processes=24, readable=(Path(sys.base_prefix),))
    count, failed = map(int, result.stdout.split())
    assert count < 24 - 2 and failed == 11  # EAGAIN; bwrap and the namespace's init count too
    assert result.process_limit_hit
    survivors = [proc.name for proc in Path("/proc").iterdir() if proc.name.isdigit()
                 and f"MARKER={marker}".encode() in _environ(proc)]
    assert survivors == []


def _environ(proc: Path) -> list[bytes]:
    try:
        return (proc / "environ").read_bytes().split(b"\0")
    except OSError:
        return []
