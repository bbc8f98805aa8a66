"""15. Scored batches on the local pool and on Ray: 50 jobs × K branches give the same rewards and groups.

The jobs are benchmarks/_rl_batch.py's: the real Claude Code 2.1.332 continues the committed fixture
``single_bash`` after batch 1 or 2 with K branches, ScriptedModel answers each branch by its temperature, the
verifier ``cat branch.txt`` gives each branch a reward known in advance. Three runs of the same jobs file:

1. the local pool (``--workers 2``);
2. a Ray cluster of three nodes on this machine (``ray.cluster_utils.Cluster``: a head and two workers, all on
   127.0.0.1, one CPU and an 80 MiB object store each), driver ``forkpoint batch --executor ray --ray-address``;
3. the same cluster (a new batch dir) with one worker node removed (``Cluster.remove_node``) once 10 jobs are done
   and while the node runs a job's continuation; then the batch is run again.

Checked: runs 1 and 2 give every (job, branch) its expected reward and identical group tables; in run 3 every job
on the removed node is ``ambiguous`` (its continuation had started: docs/scale.md), every other job is done with
its expected rewards, and the rerun runs nothing (ScriptedModel gets no request). ``--smoke``: 2 × 2 on the local
pool only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c
import _rl_batch as rl

from forkpoint import runtimes
from forkpoint.batch import BatchOptions, run_batch

NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "node_ip_address": "127.0.0.1"}


def _driver(jobs: Path, batch: Path, address: str) -> list[str]:
    return [sys.executable, "-m", "forkpoint.cli", "batch", str(jobs), "--out", str(batch), "--executor", "ray",
            "--ray-address", address, "--json"]


def _ledger(batch: Path, query: str) -> list[tuple[Any, ...]]:
    with contextlib.suppress(sqlite3.Error):
        db = sqlite3.connect(f"file:{batch / 'ledger.sqlite'}?mode=ro", uri=True)
        try:
            return db.execute(query).fetchall()
        finally:
            db.close()
    return []


def _run_on_node(raylet_pid: int, leases: Path) -> str | None:
    """The run id whose lease a worker of that node (a child of its raylet) holds."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) != raylet_pid:
                continue
            for fd in (entry / "fd").iterdir():
                with contextlib.suppress(OSError):
                    target = os.readlink(fd)
                    if target.startswith(f"{leases}/"):
                        return target.rsplit("/", 1)[1]
    return None


def _continuing(batch: Path, run_id: str) -> bool:
    journal = batch / "state" / run_id / "journal.jsonl"
    with contextlib.suppress(OSError):
        return b'"continuation_started"' in journal.read_bytes() or b'"branches_started"' in journal.read_bytes()
    return False


def _remove_mid_batch(cluster: Any, node: Any, jobs: Path, batch: Path) -> tuple[dict[str, Any], str, float]:
    """Run 3: the driver, the node removed once 10 jobs are done and while it runs a continuation."""
    started = time.monotonic()
    driver = subprocess.Popen(_driver(jobs, batch, cluster.address), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    raylet = node.all_processes["raylet"][0].process.pid
    lost = None
    try:
        deadline = time.monotonic() + 1800
        while lost is None and time.monotonic() < deadline and driver.poll() is None:
            done = _ledger(batch, "SELECT COUNT(*) FROM jobs WHERE status = 'done'")
            if done and done[0][0] >= 10:
                run_id = _run_on_node(raylet, batch / "leases")
                if run_id is not None and _continuing(batch, run_id):
                    lost = run_id
                    continue
            time.sleep(0.05)
        if lost is None:
            raise SystemExit("never saw a continuation on the node to remove")
        cluster.remove_node(node)
        out, err = driver.communicate(timeout=3600)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    if not out:
        raise SystemExit(f"the driver printed no summary: {err[-2000:]}")
    return json.loads(out), lost, time.monotonic() - started


def main() -> None:
    parser = c.parser(__doc__ or "", repeat=1)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--branches", type=int, default=2)
    args = c.finish_args(parser.parse_args())
    jobs_n, branches = (2, 2) if args.smoke else (args.jobs, args.branches)
    if runtimes.find(rl.AGENT, rl.VERSION) is None:
        raise SystemExit(f"{rl.AGENT} {rl.VERSION} is not installed (forkpoint agents install {rl.AGENT}@{rl.VERSION})")
    os.environ["ANTHROPIC_API_KEY"] = "scripted-upstream-key"
    # Ray turns a loopback address into the host's own IP unless told this is a one-machine cluster
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    expected = rl.expected(jobs_n, branches)
    rows: list[list[Any]] = []
    checks: list[str] = []
    with tempfile.TemporaryDirectory(prefix="fp-rlb-") as tmp:
        root = Path(tmp)
        os.environ["RAY_TMPDIR"] = str(root / "r")
        (root / "r").mkdir()
        model = rl.model(jobs_n, branches)
        with model.serve() as url:
            jobs = rl.jobs_file(root / "jobs.jsonl", jobs_n, branches, url)
            started = time.monotonic()
            local = run_batch(jobs, root / "local", BatchOptions(workers=2))
            rows.append(["local pool, 2 workers", _counts(local), f"{time.monotonic() - started:.1f}",
                         _verdict(rl.rewards(root / "local") == expected)])
            if not args.smoke:
                rows += _on_ray(jobs, root, model, local, expected, checks)
    body = c.table(["run", "jobs (done / ambiguous / failed)", "wall s", "rewards = expected"], rows)
    body += f"""

{jobs_n} jobs × {branches} branches (`--jobs`, `--branches`), two groups (boundaries 1 and 2). {' '.join(checks)}
Wall times are not a comparison of executors: the three one-CPU nodes run three jobs at once on two cores shared
with other work (the load average above), the local pool two.
"""
    c.emit("rl_batch", "15. Scored batches: local pool vs a 3-node Ray cluster, a node removed mid-batch", body,
           args, command=f"python benchmarks/rl_batch.py --jobs {jobs_n} --branches {branches}")


def _on_ray(jobs: Path, root: Path, model: Any, local: dict[str, Any], expected: dict[tuple[int, int], float],
            checks: list[str]) -> list[list[Any]]:
    from ray.cluster_utils import Cluster

    rows: list[list[Any]] = []
    cluster = Cluster(initialize_head=True, connect=False, head_node_args={**NODE, "include_dashboard": False})
    try:
        workers = [cluster.add_node(**NODE) for _ in range(2)]
        cluster.wait_for_nodes()
        started = time.monotonic()
        done = subprocess.run(_driver(jobs, root / "ray", cluster.address), capture_output=True, text=True,
                              timeout=3600)
        on_ray = json.loads(done.stdout)
        same = rl.rewards(root / "ray") == expected and on_ray["groups"] == local["groups"]
        rows.append(["Ray, 3 nodes", _counts(on_ray), f"{time.monotonic() - started:.1f}", _verdict(same)])
        checks.append(f"Local pool and Ray: identical group tables: {on_ray['groups'] == local['groups']} "
                      f"({', '.join(_group(g) for g in on_ray['groups'])}).")
        removed, lost, seconds = _remove_mid_batch(cluster, workers[0], jobs, root / "lost")
        lost_lines = {line for line, in _ledger(root / "lost", "SELECT line FROM jobs WHERE status = 'ambiguous'")}
        done_rewards = rl.rewards(root / "lost")
        kept = {key: value for key, value in expected.items() if key[0] + 1 not in lost_lines}
        rows.append(["Ray, 3 nodes, a worker node removed mid-batch", _counts(removed), f"{seconds:.1f}",
                     _verdict(done_rewards == kept)])
        requests = len(model.requests)
        again = subprocess.run(_driver(jobs, root / "lost", cluster.address), capture_output=True, text=True,
                               timeout=3600)
        rerun = json.loads(again.stdout)
        rows.append(["… the same batch run again", _counts(rerun), "", _verdict(len(model.requests) == requests)])
        ambiguous = [job for job in removed["failed"] if job["status"] == "ambiguous"]
        checks.append(f"Removed node: {len(ambiguous)} job(s) ambiguous (the one it ran, `{lost}`, its continuation "
                      f"started: {[j['run_id'] for j in ambiguous] == [lost]}), {removed['counts']['failed']} failed, "
                      f"the other jobs done with their expected rewards; the rerun sent ScriptedModel "
                      f"{len(model.requests) - requests} requests (nothing re-ran).")
    finally:
        cluster.shutdown()
        shutil.rmtree(root / "r", ignore_errors=True)
    return rows


def _counts(summary: dict[str, Any]) -> str:
    counts = summary["counts"]
    return f"{counts['done']} / {counts['ambiguous']} / {counts['failed']}"


def _group(group: dict[str, Any]) -> str:
    return f"n {group['n']} mean {group['mean']:.3f} std {group['std']:.3f}"


def _verdict(ok: bool) -> str:
    return "yes" if ok else "**no**"


if __name__ == "__main__":
    main()
