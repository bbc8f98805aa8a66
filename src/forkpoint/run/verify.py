"""Run a verifier (``--score CMD``) in a run's final workspace and turn what it did into a ``score`` object.

The command runs as ``/bin/sh -c CMD`` through the run's sandbox (``Sandbox.run``: local, or bwrap with the
workspace mounted at the recorded cwd and no network) under the same supervision as a replayed command: its own
process group and pids cgroup, the deadline ``--score-timeout``, the child-environment allowlist (the run's
``childenv.passing`` is in force), and at the end everything it started is killed (the reaper covers forkpoint's
own death). Its output is never held whole: the last ``TAIL_BYTES`` of stdout and of stderr are kept by a watch
on the pipes, nothing is logged to disk. Whatever happens is a ``score`` object (``run/scoring.py``); the only
exception that leaves here is the caller's own interruption.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from forkpoint.core.errors import ReplayError
from forkpoint.process import sanitized_env
from forkpoint.run.scoring import TAIL_BYTES, ScoreSpec, score_document

if TYPE_CHECKING:
    from forkpoint.sandbox.base import Sandbox


class _Tails:
    """A supervision watch keeping the last ``TAIL_BYTES`` of each stream (a verifier printing 1 GB costs 8 KiB)."""

    def __init__(self) -> None:
        self.tails = {"stdout": bytearray(), "stderr": bytearray()}

    def output(self, stream: str, chunk: bytes) -> None:
        tail = self.tails[stream]
        tail += chunk[-TAIL_BYTES:]
        if len(tail) > TAIL_BYTES:
            del tail[:-TAIL_BYTES]

    def action(self, now: float) -> int | None:
        return None


def run_verifier(spec: ScoreSpec, sandbox: Sandbox) -> dict[str, Any]:
    """Score the workspace ``sandbox`` runs in (its ``cwd``, as the tools saw it) with ``spec``."""
    tails = _Tails()
    env = sanitized_env(os.environ, strip_credentials=True)
    started = time.monotonic()
    try:
        result = sandbox.run(["/bin/sh", "-c", spec.command], cwd=sandbox.cwd, env=env, timeout_s=spec.timeout_s,
                             network=False, max_output_bytes=0, watch=tails)
    except ReplayError as error:
        return score_document(spec, exit_code=None, timed_out=False, duration_s=time.monotonic() - started,
                              stdout_tail=b"", stderr_tail=b"", start_error=error.message)
    code = result.returncode
    if code is not None and code < 0:
        code = 128 - code  # killed by signal N: the shell's 128 + N
    return score_document(spec, exit_code=None if result.timed_out else code, timed_out=result.timed_out,
                          duration_s=time.monotonic() - started, stdout_tail=bytes(tails.tails["stdout"]),
                          stderr_tail=bytes(tails.tails["stderr"]), background_killed=result.background_cleanup)


def original_reward_of(run_dir: Path) -> float:
    """The reward of a scored run (``--original-reward RUN_DIR``: the recording replayed whole and scored), read
    bounded and typed; a run without a reward is refused (configuration) naming why."""
    from forkpoint.core.errors import configuration
    from forkpoint.core.results import read_run
    from forkpoint.run.scoring import reward_of

    result = read_run(run_dir, result="result.json (is this a forkpoint run dir?)", with_manifest=False).result
    score = result.score if result is not None else None
    reward = reward_of(score)
    if reward is None:
        why = "was not scored (--score)" if score is None else f"has no reward ({score.get('failure')})"
        raise configuration(f"--original-reward {run_dir}: that run {why}")
    if result is not None and result.phase != "replayed":
        raise configuration(f"--original-reward {run_dir}: that run continued the agent; the original's reward is "
                            "the score of a --replay-only run (--after-step all)")
    return reward
