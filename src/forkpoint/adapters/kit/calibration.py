"""What every agent's calibration probe shares (forkpoint.adapters.calibrate): running the release under a
deadline, and the replay-only check of its recording with a verified version's tool semantics."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from forkpoint.adapters.calibration import Check, Outcome
from forkpoint.core.errors import trajectory as trajectory_error

RUN_TIMEOUT_S = 240.0


def run_release(argv: list[str], env: dict[str, str], cwd: Path, what: str,
                timeout: float = RUN_TIMEOUT_S) -> tuple[int, bytes]:
    """One real run of the release, killed with its process group at the deadline; (exit code, stderr tail)."""
    from forkpoint.process.reaper import die_with_parent_hook

    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, start_new_session=True, preexec_fn=die_with_parent_hook())
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise trajectory_error(f"the {what} did not finish within {timeout:g} s") from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, stderr[-2000:]


def replay_check(agent: str, candidate: str, lines: list[Any], steps: int, restore: Callable[[], Path],
                 scratch: Path, outcome: Outcome, *, name: str = "session.jsonl") -> bool:
    """Replay-only of the whole recording (``lines``, its version already rewritten to ``candidate``, so it is
    read with that version's tool semantics) in the restored workspace: every observation must be exact."""
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request

    run = scratch / f"replay-{candidate}"
    run.mkdir()
    source = run / name
    source.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), "utf-8")
    workspace = restore()
    result = execute(build_request({
        "agent": agent, "trajectory": str(source), "after_step": steps, "workspace": str(workspace),
        "state_dir": str(run / "state"), "output_dir": str(run / "out"), "run_id": "calibrate",
        "replay_only": True}, source="calibrate"))
    if result.failure is not None:
        outcome.checks.append(Check("tool_observations", False, f"replay failed: {result.failure.message}",
                                    candidate))
        return False
    compared, exact = result.metadata.get("compared_observations"), result.metadata.get("exact_observations")
    differing = []
    observations = run / "out" / "calibrate" / "observations.json"
    if observations.is_file():
        rows = json.loads(observations.read_text("utf-8"))
        rows = rows.get("observations", []) if isinstance(rows, dict) else []
        differing = [f"{row.get('name')} {row.get('id')} (batch {row.get('batch')})"
                     for row in rows if isinstance(row, dict) and not row.get("exact")]
    ok = bool(compared) and compared == exact
    outcome.checks.append(Check("tool_observations", ok, f"{exact} of {compared} observations exact"
                                + (f"; differ: {', '.join(differing)[:300]}" if differing else ""), candidate))
    return ok
