"""forkpoint.process.reaper: a supervised command's processes die with the process that supervises them.

A helper Python process supervises a command through ``run_supervised`` and is then killed with SIGKILL (no
cleanup of its own can run). PR_SET_PDEATHSIG alone (``die_with_parent``) takes the direct child; the reaper
takes everything (without PDEATHSIG: the leader, a child of the leader, a daemon with a cleared environment).
The reaper itself is never taken for a process of a run, and it leaves when its owner does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from forkpoint.process import reaper, run_supervised

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc and prctl are Linux")

_HELPER = """
import os, sys
from pathlib import Path
from forkpoint import process
from forkpoint.process import reaper
if sys.argv[1] == "no-reaper":
    reaper.start = lambda: None
script = os.environ["FP_TEST_SCRIPT"]  # not in argv: the helper must not carry the marker itself
process.run_supervised(["sh", "-c", script], cwd=Path("/"), env={"PATH": "/usr/bin:/bin"}, timeout_s=300,
                       die_with_parent=sys.argv[1] != "reaper")
"""


def _marked(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as handle:
                cmdline = handle.read()
            with open(f"/proc/{entry}/stat", "rb") as handle:
                state = handle.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state not in (b"Z", b"X"):
            found.append(int(entry))
    return found


def _wait(predicate: object, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if callable(predicate) and predicate():
            return True
        time.sleep(0.05)
    return False


def _kill_helper(mode: str, script: str, marker: str, count: int) -> list[int]:
    """Start the helper, wait for ``count`` marked processes, SIGKILL it; the marked processes alive 5 s later."""
    helper = subprocess.Popen([sys.executable, "-c", _HELPER, mode], env={**os.environ, "FP_TEST_SCRIPT": script})
    try:
        assert _wait(lambda: len(_marked(marker)) >= count, 30), "the command did not start"
        time.sleep(0.4)  # orphans re-parented and snapshotted
    finally:
        helper.send_signal(signal.SIGKILL)
        helper.wait(10)
    _wait(lambda: not _marked(marker), 5)
    left = _marked(marker)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    _clean_up_after(helper.pid)
    return left


def _clean_up_after(helper: int) -> None:
    """Without the reaper, unmarked processes of the helper's command (``sleep`` under a marked ``sh``) outlive
    it: the test kills what is left in the helper's pids cgroups, where there are any, and removes them."""
    from forkpoint.process import limits

    base = limits._hierarchy_now().path
    if base is None:
        return
    for group in base.glob(f"forkpoint-{helper}-*"):
        for pid in (group / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
        _wait(lambda group=group: not (group / "cgroup.procs").read_text().split(), 5)
        with contextlib.suppress(OSError):
            group.rmdir()


def test_pdeathsig_kills_the_direct_child() -> None:
    marker = f"fpreap{uuid.uuid4().hex}"
    # The leader (sh, the marker in its script) is the supervisor's direct child; no reaper runs.
    assert _kill_helper("no-reaper", f"sleep 300; : {marker}", marker, 1) == []


def test_without_the_reaper_a_grandchild_survives() -> None:
    """What the reaper is for: PDEATHSIG is not inherited (this documents the gap it closes)."""
    marker = f"fpreap{uuid.uuid4().hex}"
    assert _kill_helper("no-reaper", f"sh -c 'sleep 300; :' {marker}; :", marker, 2) != []


@pytest.mark.parametrize("script", [
    "sh -c 'sleep 300; :' {m}; :",
    "setsid nohup sh -c 'sleep 300; :' {m} >/dev/null 2>&1 & sleep 300",
    "(env -i setsid sh -c 'sleep 300; :' {m} </dev/null >/dev/null 2>&1 &) ; sleep 300",
], ids=["grandchild", "setsid-nohup", "env-cleared-daemon"])
def test_the_reaper_kills_descendants_and_daemons(script: str) -> None:
    marker = f"fpreap{uuid.uuid4().hex}"
    assert _kill_helper("reaper", script.format(m=marker), marker, 2) == []  # the leader and its descendant


def test_the_reaper_is_not_a_process_of_a_run(tmp_path: Path) -> None:
    result = run_supervised(["sh", "-c", "sleep 0.3"], cwd=tmp_path, env={"PATH": "/usr/bin:/bin"}, timeout_s=10)
    keeper = reaper.pid()
    assert result.returncode == 0 and not result.background_cleanup
    assert keeper is not None and os.path.exists(f"/proc/{keeper}")
    with open(f"/proc/{keeper}/environ", "rb") as handle:
        assert handle.read() == b""  # nothing of ours (no credential) is in its environment


def test_the_reaper_leaves_with_its_owner() -> None:
    code = ("from pathlib import Path; from forkpoint import process; from forkpoint.process import reaper; "
            "process.run_supervised(['true'], cwd=Path('/'), env={}, timeout_s=10); print(reaper.pid())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    keeper = int(done.stdout)

    def gone() -> bool:
        try:
            with open(f"/proc/{keeper}/stat", "rb") as handle:
                return handle.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")  # a zombie of a subreaper here
        except OSError:
            return True

    assert _wait(gone, 5), "the reaper outlived its owner"


def test_the_reaper_empties_and_removes_the_cgroups_of_its_owner() -> None:
    """forkpoint killed mid-command: its reaper also kills whatever is in the command's pids cgroup and removes it."""
    from forkpoint.process import limits

    base = limits._hierarchy_now().path
    if base is None:
        pytest.skip(f"no pids cgroup on this host: {limits._hierarchy_now().reason}")
    marker = f"fpreap{uuid.uuid4().hex}"
    helper = subprocess.Popen([sys.executable, "-c", _HELPER, "reaper"],
                              env={**os.environ, "FP_TEST_SCRIPT": f"sh -c 'sleep 300; :' {marker}; :"})

    def groups() -> list[str]:
        return [name for name in os.listdir(base) if name.startswith(f"forkpoint-{helper.pid}-")]

    try:
        assert _wait(lambda: len(_marked(marker)) >= 2 and groups(), 30), "the command did not start"
    finally:
        helper.send_signal(signal.SIGKILL)
        helper.wait(10)
    assert _wait(lambda: not groups() and not _marked(marker), 5), f"left: {groups()} {_marked(marker)}"
