"""14. Scoring overhead: a `--score` verifier run by forkpoint vs the same command run alone.

The verifier is `python3 -m pytest -q` on a one-test repository (what docs/rl.md's example scores with), and, for
the absolute cost per verifier, `true`. Per round, in a shuffled order:

* alone: ``subprocess.run(["/bin/sh", "-c", CMD], cwd=ws)``, output captured;
* forkpoint: ``forkpoint.run.verify.run_verifier`` with the local sandbox (what a run or a branch does after its
  agent: the child-env allowlist, its own process group and pids cgroup, the deadline, the output tails, the reward
  read from the output).

Target: forkpoint ≤ 1.1× the command alone (pytest).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from forkpoint.process import limits
from forkpoint.run.scoring import ScoreSpec
from forkpoint.run.verify import run_verifier
from forkpoint.sandbox import local_sandbox

TARGET = 1.1
COMMANDS = {"pytest": "python3 -m pytest -q -p no:cacheprovider", "true": "true"}


def main() -> None:
    args = c.finish_args(c.parser(__doc__ or "", repeat=15).parse_args())
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-score-") as tmp, limits.limiting(512):
        workspace = Path(tmp)
        (workspace / "test_one.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
        tasks = {}
        for label, command in COMMANDS.items():
            def alone(command: str = command) -> float:
                started = time.perf_counter()
                subprocess.run(["/bin/sh", "-c", command], cwd=workspace, capture_output=True, check=True)
                return time.perf_counter() - started

            def scored(command: str = command) -> float:
                started = time.perf_counter()
                score = run_verifier(ScoreSpec(command, 120.0), local_sandbox(workspace))
                elapsed = time.perf_counter() - started
                if score["reward"] != 1.0:
                    raise RuntimeError(f"the verifier did not pass: {score}")
                return elapsed

            tasks[f"{label} alone"], tasks[f"{label} forkpoint"] = alone, scored
        samples = c.interleaved(tasks, args.repeat, args.seed)
    rows = []
    for label in COMMANDS:
        base, ours = c.median(samples[f"{label} alone"]), c.median(samples[f"{label} forkpoint"])
        rows.append([f"`{COMMANDS[label]}`", c.ms(base), c.ms(ours), c.ms(c.p95(samples[f"{label} forkpoint"])),
                     c.ratio(ours, base), c.ms(ours - base),
                     c.verdict(ours <= TARGET * base) if label == "pytest" else ""])
    body = c.table(["verifier", "alone median ms", "forkpoint median ms", "forkpoint p95 ms", "/ alone",
                    "added ms", "≤ 1.1× target"], rows)
    body += f"""

{args.repeat} rounds after a warm-up, shuffled order; each forkpoint run checked (reward 1.0). The pids cgroup per
verifier is {limits.metadata()["mechanism"]} here; the added time is the supervision of any command (process group,
cgroup, the scan for escaped descendants, the end of the pipes), the same as for a replayed tool call (section 5).
"""
    c.emit("scoring", "14. Scoring overhead (a verifier run by forkpoint vs alone)", body, args)


if __name__ == "__main__":
    main()
