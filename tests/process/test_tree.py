"""Which processes belong to a run: group members, escaped descendants and concurrent runs (real processes)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from forkpoint.process import SUPERVISION_ENV, ProcessResult
from forkpoint.process.tree import Tracker, read_stat

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux supervisor")

Bash = Callable[..., ProcessResult]  # the conftest fixtures
Dead = Callable[[int], None]


def test_background_child_is_killed_after_the_leader_exits(bash: Bash, assert_dead: Dead) -> None:
    started = time.monotonic()
    result = bash("sleep 30 & echo $!")
    assert time.monotonic() - started < 3
    assert result.returncode == 0 and not result.timed_out
    assert result.background_cleanup
    assert_dead(int(result.stdout))


@pytest.mark.parametrize(
    "script",
    [
        pytest.param("setsid sleep 30 & echo $!", id="setsid"),
        pytest.param("(sleep 30 & echo $!) & wait", id="double-fork"),
        pytest.param("(setsid sleep 30 & echo $!) & wait", id="double-fork-setsid"),
        pytest.param("(setsid sleep 30 </dev/null >/dev/null 2>&1 & echo $!) & wait", id="daemonised"),
        pytest.param("(env -i setsid sleep 30 >/dev/null 2>&1 & echo $!) & wait", id="env-cleared"),
    ],
)
def test_escaped_descendants_are_killed(script: str, bash: Bash, assert_dead: Dead) -> None:
    started = time.monotonic()
    result = bash(script)
    assert time.monotonic() - started < 3
    assert result.returncode == 0
    assert result.background_cleanup
    assert_dead(int(result.stdout))


def test_supervision_token_is_in_the_child_env(bash: Bash) -> None:
    result = bash(f'echo "${SUPERVISION_ENV}"')
    assert len(result.stdout.strip()) == 32


def test_concurrent_supervisions_do_not_touch_each_other(bash: Bash, assert_dead: Dead) -> None:
    results: dict[str, ProcessResult] = {}

    def slow() -> None:
        results["slow"] = bash("sleep 0.6; echo slow-done")

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.1)
    quick = bash("setsid sleep 30 & echo $!")
    thread.join()
    assert quick.background_cleanup
    assert_dead(int(quick.stdout))
    assert results["slow"].returncode == 0 and results["slow"].stdout == b"slow-done\n"
    assert not results["slow"].background_cleanup


def _wait_for(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + 5
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert condition()


def test_stat_fields_are_read_after_the_last_parenthesis(tmp_path: Path) -> None:
    odd = tmp_path / "a) (b"  # comm may hold spaces and parentheses
    odd.symlink_to(shutil.which("sleep") or "/bin/sleep")
    proc = subprocess.Popen([str(odd), "30"], start_new_session=True)
    try:
        info = read_stat(proc.pid)
        assert info is not None
        assert (info.pid, info.ppid, info.pgid, info.sid) == (proc.pid, os.getpid(), proc.pid, proc.pid)
        assert info.state in ("R", "S") and info.threads == 1
    finally:
        proc.kill()
        proc.wait()
    assert read_stat(proc.pid) is None


def test_the_tracker_attributes_group_members_and_tagged_children_but_not_strangers() -> None:
    token = "test-token-0123456789"
    leader = subprocess.Popen(["/bin/sh", "-c", "sleep 30 & wait"], start_new_session=True)
    tagged = subprocess.Popen(["sleep", "30"], env={"PATH": "/usr/bin:/bin", SUPERVISION_ENV: token})
    stranger = subprocess.Popen(["sleep", "30"])
    try:
        _wait_for(lambda: any(info.ppid == leader.pid for info in Tracker(leader.pid, token).scan()))
        members = Tracker(leader.pid, token).scan()
        pids = {info.pid for info in members}
        assert tagged.pid in pids
        assert stranger.pid not in pids and leader.pid not in pids
        assert any(info.pgid == leader.pid for info in members)
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        for proc in (leader, tagged, stranger):
            proc.kill()
            proc.wait()


def _is_subreaper() -> bool:
    """What the kernel says of this process (PR_GET_CHILD_SUBREAPER)."""
    import ctypes

    value = ctypes.c_int(0)
    assert ctypes.CDLL(None, use_errno=True).prctl(37, ctypes.byref(value), 0, 0, 0) == 0
    return value.value != 0


def test_forkpoint_is_a_subreaper_only_while_a_supervision_runs(bash: Bash) -> None:
    """A program using forkpoint as a library must not go on adopting the orphans of its own process trees (they
    stayed zombies of it, e.g. the workers of a killed process pool). Before: once set, the attribute stayed."""
    seen: list[bool] = []

    def slow() -> None:
        bash("sleep 0.8")

    assert not _is_subreaper()
    first = threading.Thread(target=slow)
    first.start()
    time.sleep(0.2)
    seen.append(_is_subreaper())  # one supervision running
    second = bash("sleep 0.1")  # a second one ends while the first still runs
    seen.append(_is_subreaper())
    first.join()
    seen.append(_is_subreaper())  # none left
    assert second.returncode == 0 and seen == [True, True, False]
    # an unrelated orphan made now goes elsewhere, not to us
    orphan = subprocess.run(["/bin/bash", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True,
                            check=True)
    pid = int(orphan.stdout)
    try:
        info = read_stat(pid)
        assert info is not None and info.ppid != os.getpid()
    finally:
        os.kill(pid, signal.SIGKILL)


def test_escapes_are_still_caught_after_the_attribute_was_dropped_and_taken_again(bash: Bash,
                                                                                  assert_dead: Dead) -> None:
    bash("true")
    assert not _is_subreaper()
    escaped = bash("setsid sleep 30 & echo $!")  # re-parented to us only if we are a subreaper again
    assert escaped.background_cleanup
    assert_dead(int(escaped.stdout))
