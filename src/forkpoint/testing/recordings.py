"""Committed recordings (fixture dirs with ``meta.json`` + ``workspace-initial/``) replayed at their recorded cwd.

Tool inputs of a recording name absolute paths, so a replay needs the initial workspace restored at the recorded
cwd. Several test processes (e2e, fidelity tests, benchmarks) may restore the same /tmp path at once: every
restore holds one lock file per recorded cwd, so they wait for each other instead of sharing the directory.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from forkpoint.core.results import ReplayResult


def recorded_cwd(fixture: Path) -> Path:
    """The absolute cwd the recording was made in (``meta.json``)."""
    return Path(json.loads((fixture / "meta.json").read_text("utf-8"))["cwd"])


def lock_file(cwd: Path) -> Path:
    return cwd.parent / f".{cwd.name}.lock"


@contextmanager
def holding(cwd: Path) -> Iterator[None]:
    """Exclusive use of one recorded cwd across processes (a lock file beside it). The holder may remove the lock
    file and the emptied parent (the test suite does at its end): a lock taken on a removed file is taken again."""
    path = lock_file(cwd)
    while True:
        cwd.parent.mkdir(parents=True, exist_ok=True)
        try:
            handle = path.open("w")
        except FileNotFoundError:  # the parent was removed in between
            continue
        with handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                if path.exists() and os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino:
                    yield
                    return
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def remove_recorded(cwd: Path) -> None:
    """Remove a restored recorded cwd, its lock file and its emptied parents (waits for other holders)."""
    with holding(cwd):
        shutil.rmtree(cwd, ignore_errors=True)
        lock_file(cwd).unlink()
        for parent in cwd.parents:
            try:
                parent.rmdir()
            except OSError:  # not empty (another recorded cwd or its lock, or /tmp itself): the rest stays
                return


def restore_initial(fixture: Path) -> Path:
    """Replace the recorded cwd with the recording's initial workspace; call it while :func:`holding` that cwd.

    git keeps no empty directory, so a missing ``workspace-initial`` means an empty workspace.
    """
    cwd = recorded_cwd(fixture)
    shutil.rmtree(cwd, ignore_errors=True)
    initial = fixture / "workspace-initial"
    if initial.is_dir():
        shutil.copytree(initial, cwd, symlinks=True)
    else:
        cwd.mkdir(parents=True)
    return cwd


@contextmanager
def restored_workspace(fixture: Path, *, remove: bool = True) -> Iterator[Path]:
    """The initial workspace at the recorded cwd, held for the block (and removed after it unless ``remove`` is
    False, which leaves it for inspection until the next restore)."""
    cwd = recorded_cwd(fixture)
    with holding(cwd):
        try:
            yield restore_initial(fixture)
        finally:
            if remove:
                shutil.rmtree(cwd, ignore_errors=True)


def replay_recording(
    fixture: Path, tmp_path: Path, *, agent: str, trajectory: str | Path, after: int, **overrides: Any
) -> ReplayResult:
    """``engine.execute`` of one recording at boundary ``after`` in its restored workspace.

    ``trajectory`` is a file name inside the fixture or a path; state and output go under ``tmp_path``; the run id
    is ``run-<after>`` unless overridden; any other request key can be overridden. The workspace is left in place
    after the run (tests inspect it) and the cwd is held while the run lasts.
    """
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request

    source = trajectory if isinstance(trajectory, Path) else fixture / trajectory
    with restored_workspace(fixture, remove=False) as workspace:
        values: dict[str, Any] = {
            "agent": agent,
            "trajectory": str(source),
            "after_step": after,
            "workspace": str(workspace),
            "state_dir": str(tmp_path / "state"),
            "output_dir": str(tmp_path / "out"),
            "run_id": overrides.pop("run_id", f"run-{after}"),
        }
        values.update(overrides)
        return execute(build_request(values, source="test"))


def e2e_boundaries(boundaries: Sequence[int]) -> list[int]:
    """The boundaries an e2e suite continues a real agent at: the first, the middle and the last of ``boundaries``
    (the ones between take the same path again; ``benchmarks/continuation_fidelity.py`` continues at every boundary
    of every fixture), or every one with ``FORKPOINT_E2E_EVERY_BOUNDARY=1``."""
    chosen = sorted(set(boundaries))
    if os.environ.get("FORKPOINT_E2E_EVERY_BOUNDARY") == "1" or len(chosen) <= 3:
        return chosen
    return [chosen[0], chosen[(len(chosen) - 1) // 2], chosen[-1]]
