"""Fixtures shared by the whole test suite, and the guard that the suite leaves nothing in the system temp dir.

The session's temp dir is a private folder: ``TMPDIR`` (inherited by every subprocess, and passed on to agents by
forkpoint's environment allowlist) points at ``<private>/tmp``, pytest's own ``tmp_path`` folders live beside it.
At the end, anything left in ``<private>/tmp`` fails the session (listed by name), then the folder is removed.
Other processes on the machine (other test sessions) do not write there, so a leftover is this suite's.
The recorded cwds the fixtures restore at their absolute /tmp paths are removed at the end too (under their lock,
so a concurrent session using the same path is waited for).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpoint.testing.recordings import remove_recorded

FIXTURES = Path(__file__).parent / "fixtures"
_PRIVATE_DIRS: list[Path] = []  # the session's private folder (one)
_FIRST_SEEN: dict[str, str] = {}  # an entry of the private temp dir -> the test after which it first appeared


def _leftovers(folder: Path) -> list[str]:
    """What is in ``folder``, each with a peek inside and the test after which it first appeared."""
    found = []
    for entry in sorted(folder.iterdir()):
        inside = sorted(child.name for child in entry.iterdir())[:5] if entry.is_dir() and not entry.is_symlink() \
            else []
        shown = f"{entry.name}/ ({', '.join(inside)})" if inside else entry.name
        found.append(f"{shown}, after {_FIRST_SEEN.get(entry.name, 'the last test')}")
    return found


@pytest.hookimpl(trylast=True)
def pytest_runtest_logfinish(nodeid: str) -> None:
    for private in _PRIVATE_DIRS:
        for name in os.listdir(private / "tmp"):
            _FIRST_SEEN.setdefault(name, nodeid)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    private = Path(tempfile.mkdtemp(prefix="fpt-"))  # short: Ray and others put AF_UNIX sockets (108 bytes) in it
    (private / "tmp").mkdir()
    (private / "pytest").mkdir()
    _PRIVATE_DIRS.append(private)
    os.environ["TMPDIR"] = str(private / "tmp")
    os.environ["PYTEST_DEBUG_TEMPROOT"] = str(private / "pytest")
    tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _PRIVATE_DIRS:
        return
    private = _PRIVATE_DIRS.pop()
    for meta in FIXTURES.rglob("meta.json"):
        recorded = json.loads(meta.read_text("utf-8"))
        for key in ("cwd", "recorded_cwd"):  # a recording's cwd; a captured request's (tests resume codex there)
            cwd = recorded.get(key)
            if isinstance(cwd, str) and Path(cwd).parent.exists():
                remove_recorded(Path(cwd))
    left = _leftovers(private / "tmp")
    shutil.rmtree(private, ignore_errors=True)
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_sep("=", "FAILED: the test suite left these in its temp dir (TMPDIR)", red=True)
            for entry in left:
                reporter.write_line(entry)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session", autouse=True)
def _private_workspace_lock_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Workspace locks (forkpoint.workspace.lock) of every run the suite starts live under pytest's tmp dir, not in
    /tmp/forkpoint-locks-<uid>; subprocesses inherit it."""
    previous = os.environ.get("FORKPOINT_LOCK_DIR")
    os.environ["FORKPOINT_LOCK_DIR"] = str(tmp_path_factory.mktemp("workspace-locks"))
    yield
    if previous is None:
        os.environ.pop("FORKPOINT_LOCK_DIR", None)
    else:
        os.environ["FORKPOINT_LOCK_DIR"] = previous


@pytest.fixture(scope="session", autouse=True)
def _private_calibration_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """An empty calibration store (forkpoint.adapters.calibration): a version the developer calibrated in their
    own cache must not turn a test's unverified recording into a calibrated one."""
    previous = os.environ.get("FORKPOINT_CALIBRATIONS")
    os.environ["FORKPOINT_CALIBRATIONS"] = str(tmp_path_factory.mktemp("calibrations"))
    yield
    if previous is None:
        os.environ.pop("FORKPOINT_CALIBRATIONS", None)
    else:
        os.environ["FORKPOINT_CALIBRATIONS"] = previous


@pytest.fixture()
def fsynced_paths(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The path behind every fsync from now on, in order (the real os.fsync still runs)."""
    synced: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return synced
