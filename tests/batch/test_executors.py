"""The batch executors on scored work: the same jobs file of scored branch jobs (real Claude Code, ScriptedModel)
gives the same rewards and groups on the local pool and on a Ray cluster of three nodes on 127.0.0.1 (Ray's own
``ray.cluster_utils.Cluster``); and on that cluster, a node removed while its job runs a recorded command: the job
settles as docs/scale.md says (its tool had started: ``ambiguous``), every other job finishes, and no effectful
job runs twice (each job's marker, written by its replayed command outside any workspace, holds one line) — not
in that run, not in a rerun. The 50 × K run is benchmarks/rl_batch.py (docs/benchmarks.md)."""

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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.batch import BatchOptions, run_batch, status
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"
JOBS, BRANCHES = 4, 2  # CI's share; benchmarks/rl_batch.py ran 50 × 4 (docs/benchmarks.md §15)
#: each node of the simulated cluster: one CPU (one job at a time), the smallest object store Ray accepts
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024, "node_ip_address": "127.0.0.1"}


def _rl_batch() -> Any:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import _rl_batch  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(BENCHMARKS))
    return _rl_batch


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """Three Ray nodes on this machine (a head and two workers), all on 127.0.0.1, each with one CPU; the
    ScriptedModel key in the environment every node's workers inherit. Its files live in a short private temp dir
    (Ray's unix sockets), removed after."""
    temp = Path(tempfile.mkdtemp(prefix="r"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("RAY_TMPDIR", str(temp))  # Cluster writes its address file there, not in /tmp/ray
        patch.setenv("ANTHROPIC_API_KEY", "scripted-upstream-key")
        # Ray turns a loopback address into the host's own IP before it connects (its GCS listens on 127.0.0.1
        # only here); a one-machine cluster is what this setting of Ray's is for. The drivers (subprocesses)
        # and every node's processes inherit it.
        patch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        cluster_utils = pytest.importorskip("ray.cluster_utils", reason="ray is not installed (forkpoint[ray])")
        ray_cluster = cluster_utils.Cluster(initialize_head=True, connect=False,
                                            head_node_args={**NODE, "include_dashboard": False})
        try:
            workers = [ray_cluster.add_node(**NODE) for _ in range(2)]
            ray_cluster.wait_for_nodes()
            yield ray_cluster, workers
        finally:
            ray_cluster.shutdown()
            shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.e2e
def test_scored_branches_give_the_same_rewards_and_groups_on_the_local_pool_and_on_ray(
        tmp_path: Path, cluster: Any) -> None:
    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed (forkpoint agents install claude-code@2.1.332)")
    rl = _rl_batch()
    ray_cluster, _ = cluster
    model = rl.model(JOBS, BRANCHES)
    with model.serve() as url, pytest.MonkeyPatch.context() as patch:
        patch.setenv("ANTHROPIC_API_KEY", "scripted-upstream-key")
        jobs = rl.jobs_file(tmp_path / "jobs.jsonl", JOBS, BRANCHES, url)
        local = run_batch(jobs, tmp_path / "local", BatchOptions(workers=2))
        done = subprocess.run(_driver(jobs, tmp_path / "ray", ray_cluster.address), capture_output=True, text=True,
                              timeout=600)
    assert done.returncode == 0, done.stderr
    on_ray = json.loads(done.stdout)
    assert local["counts"]["done"] == on_ray["counts"]["done"] == JOBS, (local["failed"], on_ray["failed"])
    expected = rl.expected(JOBS, BRANCHES)
    assert rl.rewards(tmp_path / "local") == expected  # every branch ran and was scored as scripted
    assert rl.rewards(tmp_path / "ray") == expected
    assert local["groups"] == on_ray["groups"] and len(local["groups"]) == 2
    assert sorted(group["n"] for group in on_ray["groups"]) == [JOBS, JOBS]  # half the jobs × 2 branches per boundary
    by_run: dict[str, dict[Any, Any]] = {}  # each branch's advantages, by job line and branch: the same on both
    for batch in ("local", "ray"):
        for document in (tmp_path / batch / "runs").glob("*/branches.json"):
            rows = json.loads(document.read_text())["branches"]
            by_run.setdefault(batch, {}).update({(row["temperature"], row["branch"]): row["group"] for row in rows})
    assert by_run["local"] == by_run["ray"] and len(by_run["ray"]) == JOBS * BRANCHES
    assert len(_workers(tmp_path / "ray")) > 1  # the jobs ran in more than one Ray worker process


def _driver(jobs: Path, batch: Path, address: str) -> list[str]:
    """`forkpoint batch` on the cluster at ``address``, its summary as JSON on stdout."""
    return [sys.executable, "-m", "forkpoint.cli", "batch", str(jobs), "--out", str(batch), "--executor", "ray",
            "--ray-address", address, "--json"]


def _workers(batch: Path) -> set[str]:
    """The worker (host:pid) each job ran in, from the ledger."""
    db = sqlite3.connect(f"file:{batch / 'ledger.sqlite'}?mode=ro", uri=True)
    try:
        return {row[0] for row in db.execute("SELECT worker FROM jobs")}
    finally:
        db.close()


def _gated_session(root: Path, index: int, markers: Path, gate: Path) -> tuple[Path, Path]:
    """A Claude session whose batch 1 appends a line to ``markers/<i>`` (one line per execution, outside any
    workspace), then waits for ``gate`` to exist, then reads its data file."""
    source = root / f"src-{index}"
    source.mkdir(parents=True)
    (source / "data.txt").write_text(f"data {index}\n")
    builder = ClaudeSessionBuilder(session_id=f"0000000{index % 10}-0000-4000-8000-{index:012d}", cwd=str(source))
    builder.user_prompt("Mark, wait and read.")
    command = f"echo run >> {markers}/{index} && until [ -e {gate} ]; do sleep 0.05; done && cat data.txt"
    builder.assistant([text("mark"), tool_use("toolu_0001", "Bash", {"command": command})])
    builder.results({"toolu_0001": f"data {index}"})
    builder.assistant([text("Done.")])
    return builder.write(root / f"session-{index}.jsonl"), source


def _run_on_node(raylet_pid: int, leases: Path) -> str | None:
    """The run id whose lease a worker process of that node (a child of its raylet) holds open."""
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


def _running(marker: str) -> list[int]:
    """Live processes whose command line names ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
    return found


def _until(condition: Any, what: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_node_removed_mid_batch_settles_its_job_and_no_effectful_job_runs_twice(
        tmp_path: Path, cluster: Any) -> None:
    ray_cluster, workers = cluster
    markers, gate = tmp_path / "markers", tmp_path / "gate"
    markers.mkdir()
    rows = []
    for index in range(6):
        session, source = _gated_session(tmp_path / "rec", index, markers, gate)
        rows.append({"trajectory": str(session), "after_step": 1, "mode": "replay-only",
                     "workspace_from": str(source), "score": "grep -c data data.txt"})
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps(row) + "\n" for row in rows))
    batch = tmp_path / "batch"
    command = _driver(jobs, batch, ray_cluster.address)
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # one job per node (one CPU each), all three inside their replayed command (marked, waiting at the gate)
        _until(lambda: len(list(markers.iterdir())) == 3, "three jobs running their recorded command")
        target = workers[0]
        raylet = target.all_processes["raylet"][0].process.pid
        lost = _until(lambda: _run_on_node(raylet, batch / "leases"), "the job on the node to remove")
        ray_cluster.remove_node(target)
        gate.touch()
        out, err = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.communicate()
    assert driver.returncode == 1, err  # a job is ambiguous
    summary = json.loads(out)
    assert summary["counts"] == {"pending": 0, "running": 0, "done": 5, "failed": 0, "ambiguous": 1}, summary
    [settled] = summary["failed"]
    assert (settled["run_id"], settled["status"], settled["category"]) == (lost, "ambiguous", "ambiguous_execution")
    assert "the worker running this job died" in settled["message"]
    assert sorted(path.name for path in markers.iterdir()) == [str(i) for i in range(6)]
    assert all(path.read_text() == "run\n" for path in markers.iterdir())  # each job's command ran once
    assert _running(str(gate)) == []  # the removed node's job left no command behind
    # each job is its own trajectory, so its own group: the five done jobs' rewards, the lost one not scored
    assert sorted((group["n"], group["mean"]) for group in summary["groups"]) == [(1, 1.0)] * 5

    # a rerun on the remaining nodes runs nothing again: the ambiguous job is never re-executed
    rerun = subprocess.run(command, capture_output=True, text=True, timeout=300)
    again = json.loads(rerun.stdout)
    assert again["counts"]["ambiguous"] == 1 and again["counts"]["done"] == 5, rerun.stderr
    assert all(path.read_text() == "run\n" for path in markers.iterdir())
    assert status(batch)["failed"][0]["run_id"] == lost
