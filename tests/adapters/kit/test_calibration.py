"""The probe runner: a release that hangs is killed with everything it started at the deadline."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from forkpoint.adapters.kit.calibration import run_release
from forkpoint.core.errors import ReplayError


def test_the_exit_code_and_the_stderr_tail_are_returned(tmp_path: Path) -> None:
    code, stderr = run_release(["/bin/sh", "-c", "head -c 5000 /dev/zero | tr '\\0' x >&2; echo end >&2; exit 3"],
                               {"PATH": "/usr/bin:/bin"}, tmp_path, "probe")
    assert code == 3 and len(stderr) == 2000 and stderr.endswith(b"xend\n")


def test_a_hanging_release_and_its_children_are_killed_at_the_deadline(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    with pytest.raises(ReplayError, match=r"did not finish within 0\.5 s"):
        run_release(["/bin/sh", "-c", f"sleep 300 & echo $! > {pid_file}; wait"], {"PATH": "/usr/bin:/bin"},
                    tmp_path, "probe", timeout=0.5)
    child = int(pid_file.read_text())
    # SIGKILL was sent to the whole group at the deadline; a killed process is still torn down asynchronously
    # (state R while it exits on a loaded machine), so wait for that, bounded, instead of reading one instant.
    deadline = time.monotonic() + 30
    while True:
        try:
            state = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        if state in ("gone", "Z") or time.monotonic() > deadline:
            break
        time.sleep(0.01)
    assert state in ("gone", "Z"), f"the release's child {child} survived ({state})"


def test_the_bridge_verdict_log_counts_when_a_failed_result_carries_no_bridge_summary(tmp_path: Path) -> None:
    """mini-swe-agent 2.2's agent asks for a new step limit once the check's budget is spent (EOFError): the run
    fails after the gate validated its first request, and that verdict is read from the run's own log."""
    from forkpoint.adapters.kit.calibration import _verdicts

    log = tmp_path / "state" / "calibrate" / "bridge-log.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text('{"verdict": "ok"}\n{"verdict": "local"}\nnot json\n{"verdict": "refused"}\n[1]\n')
    assert _verdicts(tmp_path / "state") == (1, 1)
    assert _verdicts(tmp_path / "nothing") == (0, 0)
