"""The process limit of a supervised command (a pids cgroup each): a bounded fork storm is stopped at the limit,
the host is unaffected, nothing of the storm survives, and where no cgroup can be made the run says why."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from forkpoint.process import limits, run_supervised

#: Forks until a fork fails (at most 300: bounded even where nothing limits it); each child leaves the session and
#: sleeps, so only the supervisor's cleanup ends it. Prints "<children> <errno of the failed fork or 0>".
STORM = """
import os, sys, time
children = []
failed = 0
while len(children) < 300:
    try:
        pid = os.fork()
    except OSError as exc:
        failed = exc.errno
        break
    if pid == 0:
        os.setsid()
        time.sleep(120)
        os._exit(0)
    children.append(pid)
open(sys.argv[1], "w").write(" ".join(map(str, children)))
print(len(children), failed)
"""


def _hierarchy() -> Path:
    found = limits._hierarchy_now().path
    if found is None:
        pytest.skip(f"no pids cgroup on this host: {limits._hierarchy_now().reason}")
    return found


def _ours(base: Path) -> list[str]:
    return [name for name in os.listdir(base) if name.startswith(f"forkpoint-{os.getpid()}-")]


def test_a_fork_storm_stops_at_the_limit_and_nothing_of_it_survives(
        tmp_path: Path, assert_dead: Callable[[int], None]) -> None:
    base = _hierarchy()
    pids_file = tmp_path / "pids.txt"
    with limits.limiting(32):
        result = run_supervised([sys.executable, "-c", STORM, str(pids_file)], cwd=tmp_path,
                                env=dict(os.environ), timeout_s=60)
        facts = limits.metadata()
    count, failed = map(int, result.stdout.split())
    assert count < 32 and failed == errno.EAGAIN  # the leader counts: at most 31 children
    assert result.process_limit_hit and result.background_cleanup
    for pid in map(int, pids_file.read_text().split()):
        assert_dead(pid)
    assert _ours(base) == []  # the cgroup is gone
    assert facts == {"max_processes": 32, "commands": 1, "mechanism": "cgroup-v1-pids", "commands_at_limit": 1}
    # the host is fine: the next command forks freely
    after = run_supervised(["/bin/sh", "-c", "for i in 1 2 3 4 5 6 7 8; do /bin/true & done; wait; echo ok"],
                           cwd=tmp_path, env=dict(os.environ), timeout_s=30)
    assert after.stdout == b"ok\n" and not after.process_limit_hit


def test_a_process_the_tracker_cannot_attribute_dies_with_the_cgroup(
        tmp_path: Path, assert_dead: Callable[[int], None]) -> None:
    """The tracker's documented gap: while another supervision runs, a descendant that clears its environment,
    leaves the session and is orphaned before the first scan is not attributed. It is still in the cgroup."""
    _hierarchy()
    pid_file = tmp_path / "escaped.pid"
    other = threading.Thread(target=run_supervised, args=(["/bin/sleep", "3"],),
                             kwargs={"cwd": tmp_path, "env": dict(os.environ), "timeout_s": 30})
    other.start()
    try:
        script = (f"env -i setsid /bin/sh -c 'echo $$ > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; "
                  f"exec sleep 120' </dev/null >/dev/null 2>&1 & while [ ! -s {pid_file} ]; do :; done")
        result = run_supervised(["/bin/sh", "-c", script], cwd=tmp_path, env=dict(os.environ), timeout_s=30)
        assert result.returncode == 0
        assert result.background_cleanup
        assert_dead(int(pid_file.read_text()))
    finally:
        other.join()


@pytest.fixture()
def no_cgroups(tmp_path: Path) -> Iterator[None]:
    """A host whose /proc names no pids hierarchy (cgroup v2 only, as in many containers)."""
    proc = tmp_path / "proc" / "self"
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text("0::/\n")
    (proc / "mountinfo").write_text("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n")
    saved = limits.PROC_ROOT, limits._hierarchy
    limits.PROC_ROOT, limits._hierarchy = tmp_path / "proc", None
    try:
        yield
    finally:
        limits.PROC_ROOT, limits._hierarchy = saved


def test_without_a_pids_cgroup_the_run_says_so_and_why(tmp_path: Path, no_cgroups: None) -> None:
    with limits.limiting(16):
        result = run_supervised(["/bin/echo", "ran"], cwd=tmp_path, env=dict(os.environ), timeout_s=30)
        facts = limits.metadata()
    assert result.stdout == b"ran\n" and not result.process_limit_hit
    assert facts["mechanism"] == "unavailable" and facts["max_processes"] == 16
    assert "no cgroup v1 pids controller" in facts["reason"]


_AS_NOBODY = """
import json, os, sys
from pathlib import Path
from forkpoint.process import limits, run_supervised
with limits.limiting(32):
    result = run_supervised([sys.executable, "-c", sys.argv[1], "/dev/null"], cwd=Path("/"),
                            env={"PATH": "/usr/bin:/bin"}, timeout_s=60)
    print(json.dumps({"storm": result.stdout.decode(), "facts": limits.metadata()}))
"""


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/usr/bin/setpriv")
                    or not os.path.exists("/usr/bin/python3"),
                    reason="needs root to become another user (setpriv), and a system python3 that user can run")
def test_a_user_without_a_writable_cgroup_gets_rlimit_nproc(tmp_path: Path) -> None:
    """Not root, so no pids cgroup of its own (and no root exemption from RLIMIT_NPROC): the fallback still stops
    the storm, and the run says which mechanism and why."""
    src = Path(__file__).resolve().parents[2] / "src"
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                           _AS_NOBODY, STORM], env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(src)},
                          capture_output=True, text=True, timeout=120, check=False, cwd="/")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    count, failed = map(int, report["storm"].split())
    assert count < 40 and failed == errno.EAGAIN
    facts = report["facts"]
    assert facts["mechanism"] == "rlimit-nproc" and "not writable by uid 65534" in facts["reason"]


def test_the_request_default_is_the_limit_default() -> None:
    from forkpoint.run.request import ReplayRequest

    field = ReplayRequest.__dataclass_fields__["max_processes"]
    assert field.default == limits.DEFAULT_MAX_PROCESSES


def test_a_limit_of_one_still_runs_the_command_and_forbids_its_forks(tmp_path: Path) -> None:
    """The spawning thread is in the cgroup during the spawn: it must not take the leader's place."""
    _hierarchy()
    result = run_supervised(["/bin/sh", "-c", "echo leader; /bin/true && echo forked"], cwd=tmp_path,
                            env=dict(os.environ), timeout_s=30, max_processes=1)
    assert result.stdout == b"leader\n" and result.process_limit_hit
