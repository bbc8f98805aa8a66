"""Where batch jobs run: a local process pool (many jobs per worker interpreter) or an existing Ray cluster.

Both take (spec, batch dir, run id) and hand back the worker's outcome JSON as each job finishes; the driver keeps
at most one job in flight per worker slot, so nothing queues up in memory. Local workers ignore SIGINT (the driver
decides what Ctrl-C means) and die with the driver (PR_SET_PDEATHSIG, and the pool's own pipe watch).
"""

from __future__ import annotations

import concurrent.futures as futures
import contextlib
import ctypes
import multiprocessing
import signal
from typing import Any, Protocol

PR_SET_PDEATHSIG = 1


class Executor(Protocol):
    slots: int

    def submit(self, spec: dict[str, Any], batch_dir: str, run_id: str, driver: str) -> Any:
        """Start the job; ``driver`` is the submitting driver's token (its lease check: forkpoint.batch.lock)."""

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, dict[str, Any] | BaseException]]:
        """Finished handles with the worker's outcome JSON, or the exception that lost the job (a dead worker
        process, a lost Ray node)."""

    def close(self, *, cancel: bool) -> None: ...


def _init_local_worker() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the pool's broken-pipe detection remains
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class LocalPool:
    """``workers`` processes started once (spawn: each is the driver's own child, so PR_SET_PDEATHSIG ties it to the
    driver — a forkserver's children would keep the forkserver, and so themselves, alive after a killed driver),
    each running job after job in one interpreter."""

    def __init__(self, workers: int) -> None:
        self.slots = workers
        context = multiprocessing.get_context("spawn")
        self.pool = futures.ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                                initializer=_init_local_worker)

    def submit(self, spec: dict[str, Any], batch_dir: str, run_id: str, driver: str) -> Any:
        from forkpoint.batch.worker import run_job

        return self.pool.submit(run_job, spec, batch_dir, run_id, driver)

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, dict[str, Any] | BaseException]]:
        done, _ = futures.wait(handles, timeout=timeout, return_when=futures.FIRST_COMPLETED)
        return [(handle, handle.exception() or handle.result()) for handle in done]

    def close(self, *, cancel: bool) -> None:
        self.pool.shutdown(wait=not cancel, cancel_futures=cancel)


class RayCluster:
    """Jobs as Ray tasks on an existing cluster (``address``) or a local head; each task asks for ``cpus`` CPUs
    and ``memory`` bytes. The trajectory travels in the object store (read by the driver once per trajectory);
    the batch dir (outputs) and workspace sources must be paths every node sees (shared storage: docs/scale.md)."""

    def __init__(self, address: str | None, *, cpus: float, memory: int | None, slots: int | None,
                 temp_dir: str | None = None, local_cpus: int | None = None) -> None:
        import importlib

        try:
            ray: Any = importlib.import_module("ray")  # the optional extra; its API used untyped
        except ModuleNotFoundError:
            raise RuntimeError("--executor ray needs Ray: pip install 'forkpoint[ray]'") from None
        self.ray = ray
        if not ray.is_initialized():
            if address in (None, "local"):
                extra = {"_temp_dir": temp_dir} if temp_dir else {}
                ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False,
                         num_cpus=local_cpus, _node_ip_address="127.0.0.1", **extra)
            else:
                ray.init(address=address, log_to_driver=False, configure_logging=False)
        total = ray.cluster_resources().get("CPU", 1)
        self.slots = slots or max(1, int(total // cpus))
        self.remote = ray.remote(num_cpus=cpus, memory=memory, max_retries=0)(_ray_job)
        self.trajectories: dict[str, Any] = {}

    def submit(self, spec: dict[str, Any], batch_dir: str, run_id: str, driver: str) -> Any:
        sha = spec["trajectory_sha256"]
        if sha not in self.trajectories:
            with open(spec["trajectory"], "rb") as handle:
                self.trajectories[sha] = self.ray.put(handle.read())
        return self.remote.remote(spec, batch_dir, run_id, self.trajectories[sha], driver)

    def wait(self, handles: list[Any], timeout: float) -> list[tuple[Any, dict[str, Any] | BaseException]]:
        ready, _ = self.ray.wait(handles, num_returns=1, timeout=timeout)
        finished: list[tuple[Any, dict[str, Any] | BaseException]] = []
        for handle in ready:
            try:
                finished.append((handle, self.ray.get(handle)))
            except Exception as error:  # a worker or node died under the task
                finished.append((handle, error))
        return finished

    def close(self, *, cancel: bool) -> None:
        self.ray.shutdown()


def _ray_job(spec: dict[str, Any], batch_dir: str, run_id: str, trajectory: bytes, driver: str) -> dict[str, Any]:
    """On a Ray worker: the trajectory written into the batch dir by content (once per node), then the job."""
    import os
    from pathlib import Path

    from forkpoint.batch.worker import run_job

    folder = Path(batch_dir) / "inputs"
    folder.mkdir(mode=0o700, exist_ok=True)
    local = folder / f"{spec['trajectory_sha256']}{Path(spec['trajectory']).suffix}"
    if not local.exists():
        staged = folder / f".{local.name}.{os.getpid()}"
        staged.write_bytes(trajectory)
        os.replace(staged, local)
    return run_job({**spec, "trajectory": str(local)}, batch_dir, run_id, driver)
