"""11. Batch throughput: prepare-only and replay-only jobs/s of `forkpoint batch` with 1 and 2 local workers and on a
local Ray head (2 CPUs), against a shell loop of `forkpoint replay` CLI calls over the same jobs, side by side in
one run; the ledger's own cost per job; the driver's peak RSS at 1k and 10k jobs; and a jobs file of N identical
lines (one job, N - 1 duplicates) through `forkpoint batch` at two sizes (`--duplicates-only` runs just that).

Goals: prepare-only ≥ 20× the shell loop's throughput per core; ledger ≤ 1 ms per job; driver memory flat in the
number of jobs; a duplicate line costs the same however many came before (per-line time at 84k ≤ 1.5× at 16k;
before the fix 16k lines took 18 s and 84k over 11 minutes). Jobs are generated 2-batch Claude Code sessions
(distinct bytes, so distinct identities); each replay-only job gets its own workspace copied from a seed directory
(path-mapped). Every measurement starts a fresh batch dir; the jobs/s include the driver's start, parsing and
ledger work.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from forkpoint.batch.jobs import Job
from forkpoint.batch.ledger import Ledger, Outcome
from forkpoint.testing.claude_sessions import simple_session

DRIVER = """
import json, resource, sys, time
from pathlib import Path
from forkpoint.batch import BatchOptions, run_batch
started = time.perf_counter()
summary = run_batch(Path(sys.argv[1]), Path(sys.argv[2]), BatchOptions(workers=int(sys.argv[3]),
                    executor=sys.argv[4], ray_temp_dir=sys.argv[5] or None))
print(json.dumps({"seconds": time.perf_counter() - started, "done": summary["counts"]["done"],
                  "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def make_jobs(root: Path, count: int, mode: str) -> Path:
    sessions = root / "sessions"
    sessions.mkdir(exist_ok=True)
    seed = root / "seed"
    seed.mkdir(exist_ok=True)
    (seed / "notes.txt").write_text("seed\n")
    lines = []
    for index in range(count):
        path = sessions / f"s{index:06d}.jsonl"
        if not path.exists():
            builder = simple_session(2)
            builder.cwd = str(seed)
            for record in builder.records:
                record["cwd"] = builder.cwd
            builder.records[0]["message"]["content"] = f"Do task {index}."
            builder.write(path)
        job = {"trajectory": str(path), "after_step": 1 + index % 2, "mode": mode}
        if mode != "prepare-only":
            job["workspace_from"] = str(seed)
        lines.append(json.dumps(job))
    jobs = root / f"jobs-{mode}-{count}.jsonl"
    jobs.write_text("\n".join(lines) + "\n")
    return jobs


def shell_loop(jobs: Path, root: Path) -> float:
    """jobs/s of one `forkpoint replay` process per job, as a shell loop would run them."""
    rows = [json.loads(line) for line in jobs.read_text().splitlines()]
    out = c.fresh_dir(root / "loop")
    started = time.perf_counter()
    for index, row in enumerate(rows):
        argv = [*c.forkpoint_argv(), "replay", "--agent", "claude-code", "--trajectory", row["trajectory"],
                "--after-step", str(row["after_step"]), "--run-id", f"r{index}", "--output-dir", str(out / "runs"),
                "--state-dir", str(out / "state")]
        if row["mode"] == "prepare-only":
            argv.append("--prepare-only")
        else:
            workspace = out / "ws" / str(index)
            argv += ["--replay-only", "--workspace", str(workspace), "--workspace-from", row["workspace_from"],
                     "--path-map", f"{root / 'seed'}={workspace}"]
        subprocess.run(argv, check=True, capture_output=True)
    return len(rows) / (time.perf_counter() - started)


def batch(jobs: Path, root: Path, workers: int, executor: str) -> dict[str, float]:
    out = c.fresh_dir(root / f"batch-{executor}-{workers}")
    ray_dir = tempfile.mkdtemp(prefix="fp-ray-") if executor == "ray" else ""
    try:
        done = subprocess.run([sys.executable, "-c", DRIVER, str(jobs), str(out), str(workers), executor, ray_dir],
                              check=True, capture_output=True, text=True)
    finally:
        if ray_dir:
            shutil.rmtree(ray_dir, ignore_errors=True)
    sample = json.loads(done.stdout.strip().splitlines()[-1])
    return sample


def ledger_cost(root: Path, count: int, mode: str) -> float:
    """ms per job of the ledger alone: insert, mark running (durable for effectful modes), finish."""
    ledger = Ledger(c.fresh_dir(root / f"ledger-{mode}") / "ledger.sqlite")
    jobs = [Job(identity=f"{i:064x}", line=i, trajectory=Path("/t"), trajectory_sha256="0" * 64, agent="claude-code",
                after_step=1, mode=mode, recorded_cwd=None, options={}) for i in range(count)]
    started = time.perf_counter()
    ledger.add_jobs(iter(jobs))
    for job in jobs:
        ledger.mark_running(job, job.run_id, "w")
        ledger.finish(Outcome(identity=job.identity, run_id=job.run_id, exit_code=0, category=None, retryable=False,
                              message=None, phase="prepared", quality="verified", agent_status="not_started",
                              seconds=0.0, worker="w"))
    elapsed = time.perf_counter() - started
    ledger.close()
    return elapsed / count * 1000


def duplicates(root: Path, count: int) -> float:
    """Seconds of `forkpoint batch` (the CLI, one worker) on ``count`` identical prepare-only lines."""
    session = make_jobs(root, 1, "prepare-only").read_text().splitlines()[0]
    jobs = root / f"duplicates-{count}.jsonl"
    jobs.write_text((session + "\n") * count)
    out = c.fresh_dir(root / f"duplicates-{count}")
    started = time.perf_counter()
    done = subprocess.run([*c.forkpoint_argv(), "batch", str(jobs), "--out", str(out), "--workers", "1", "--json"],
                          capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - started
    summary = json.loads(done.stdout)
    assert summary["jobs"] == 1 and summary["counts"]["done"] == 1, summary
    return elapsed


def duplicate_rows(root: Path, sizes: tuple[int, int]) -> str:
    seconds = {count: duplicates(root, count) for count in sizes}
    per_line = {count: seconds[count] / count * 1e6 for count in sizes}
    growth = per_line[sizes[1]] / per_line[sizes[0]]
    body = c.table(("identical lines", "seconds (CLI, 1 worker)", "µs per line"),
                   [(f"{count:,}", f"{seconds[count]:.2f}", f"{per_line[count]:.0f}") for count in sizes])
    return body + (f"\n\nPer-line cost at {sizes[1]:,} vs {sizes[0]:,} lines: {growth:.2f}× → "
                   f"{c.verdict(growth <= 1.5)} (≤ 1.5×: constant work per duplicate).")


def main() -> None:
    parser = c.parser(__doc__ or "", repeat=1)
    parser.add_argument("--duplicates-only", action="store_true",
                        help="Only the identical-lines measurement (printed, never written).")
    args = c.finish_args(parser.parse_args())
    sizes = (1000, 4000) if args.smoke else (16000, 84000)  # smoke sizes: CI time
    if args.duplicates_only:
        with tempfile.TemporaryDirectory(prefix="forkpoint-bench-batch-") as tmp:
            print(duplicate_rows(Path(tmp), sizes))
        return
    small, large = (8, 24) if args.smoke else (200, 1000)
    huge = 48 if args.smoke else 10000
    rows = []
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-batch-") as tmp:
        root = Path(tmp)
        executors = [("local", 1), ("local", 2)]
        if not args.smoke:  # (the smoke run leaves Ray to tests/batch: starting a head costs ~15 s)
            try:
                import ray  # noqa: F401

                executors.append(("ray", 2))
            except ModuleNotFoundError:
                pass
        for mode, count in (("prepare-only", large), ("replay-only", small)):
            jobs = make_jobs(root, count, mode)
            loop = shell_loop(make_jobs(root, min(count, small), mode), root)
            rows.append((mode, "shell loop of `forkpoint replay`", 1, f"{loop:.1f}", "1.00×", ""))
            for executor, workers in executors:
                sample = batch(jobs, root, workers, executor)
                assert sample["done"] == count, sample
                rate = count / sample["seconds"]
                rows.append((mode, f"batch, {executor}", workers, f"{rate:.1f}", f"{rate / workers / loop:.1f}×",
                             f"{sample['rss_kib'] / 1024:.0f}"))
        prepare_loop = float(rows[0][3])
        best_per_core = max(float(r[3]) / r[2] for r in rows[1:len(executors) + 1])
        costs = {mode: ledger_cost(root, 2000 if not args.smoke else 100, mode) for mode in ("prepare-only",
                                                                                              "replay-only")}
        rss = {}
        for count in (large, huge):
            sample = batch(make_jobs(root, count, "prepare-only"), root, 2, "local")
            rss[count] = sample["rss_kib"] / 1024
        duplicated = duplicate_rows(root, sizes)
    body = c.table(("mode", "runner", "workers", "jobs/s", "per core vs loop", "driver peak RSS MiB"), rows)
    ratio = best_per_core / prepare_loop
    growth = rss[huge] / rss[large]
    body += (f"\n\nPrepare-only per core vs the shell loop ≥ 20×: {ratio:.1f}× → {c.verdict(ratio >= 20)}. "
             f"Ledger per job: prepare-only {costs['prepare-only']:.3f} ms, replay-only (durable running mark) "
             f"{costs['replay-only']:.3f} ms → {c.verdict(max(costs.values()) <= 1.0)} (≤ 1 ms). Driver peak RSS "
             f"{rss[large]:.0f} MiB at {large:,} jobs, {rss[huge]:.0f} MiB at {huge:,} → {growth:.2f}× "
             f"({c.verdict(growth <= 1.25)}, flat = ≤ 1.25×). The shell loop runs {small} jobs of each mode.")
    body += f"\n\nOne job repeated on every line of the jobs file:\n\n{duplicated}"
    c.emit("batch_throughput", "11. Batch throughput (jobs/s, ledger cost, driver memory)", body, args)


if __name__ == "__main__":
    main()
