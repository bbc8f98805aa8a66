"""`forkpoint batch` end to end: a 200-job prepare-only batch over generated trajectories of every adapter, a
20-job replay-only batch with side-effect markers (local pool and a local Ray cluster give the same per-job
results), kill -9 of the driver mid-batch and a rerun (one execution per job, or an ambiguous report), bad lines,
merged duplicates, and a continue batch with the bridge's stub upstream."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.batch import BatchOptions, run_batch, status
from forkpoint.batch.expand import expand
from forkpoint.batch.jobs import Job, read_lines
from forkpoint.batch.ledger import Ledger
from forkpoint.testing import ScriptedModel
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

BENCHMARKS = Path(__file__).parents[2] / "benchmarks"


def _samples(root: Path, per_adapter: int) -> list[Any]:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import _samples  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(BENCHMARKS))
    return [_samples.make(adapter, index, root) for adapter in _samples.ADAPTERS for index in range(per_adapter)]


def _jobs(path: Path, rows: list[dict[str, Any]], extra: list[str] = ()) -> Path:  # type: ignore[assignment]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows) + "".join(line + "\n" for line in extra))
    return path


def _marker_session(root: Path, index: int, markers: Path, *, pause: float = 0.0) -> tuple[Path, Path]:
    """A Claude session recorded in ``root/src-<i>`` whose batch 1 appends a line to ``markers/<i>`` (outside any
    workspace, so every execution is counted) and whose batch 2 lists the workspace."""
    source = root / f"src-{index}"
    source.mkdir(parents=True)
    (source / "data.txt").write_text(f"data {index}\n")
    builder = ClaudeSessionBuilder(session_id=f"0000000{index % 10}-0000-4000-8000-{index:012d}", cwd=str(source))
    builder.user_prompt("Mark and list.")
    sleep = f"sleep {pause} && " if pause else ""
    builder.assistant([text("mark"), tool_use("toolu_0001", "Bash",
                                              {"command": f"{sleep}echo run >> {markers}/{index} && cat data.txt"})])
    builder.results({"toolu_0001": f"data {index}"})
    builder.assistant([text("list"), tool_use("toolu_0002", "Bash", {"command": "ls"})])
    builder.results({"toolu_0002": "data.txt"})
    builder.assistant([text("Done.")])
    return builder.write(root / f"session-{index}.jsonl"), source


def _a_job_runs(batch: Path) -> bool:
    """Whether a job's tool started: a ``tool_started`` event in one of its runs' journals (read, never locked)."""
    for journal in batch.glob("state/*/journal.jsonl"):
        with contextlib.suppress(OSError):
            if b'"tool_started"' in journal.read_bytes():
                return True
    return False


def _carrying(marker: str) -> list[int]:
    """Live processes whose environment holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_200_prepare_only_jobs_of_every_adapter(tmp_path: Path) -> None:
    samples = _samples(tmp_path / "samples", 15)
    rows = [{"trajectory": str(sample.trajectory), "agent": sample.adapter, "after_step": [1, 2]}
            for sample in samples]
    jobs = _jobs(tmp_path / "jobs.jsonl", rows, extra=["{broken", json.dumps(rows[0])])
    summary = run_batch(jobs, tmp_path / "batch", BatchOptions(workers=2))
    assert summary["jobs"] == 2 * len(samples) == 210
    assert summary["counts"]["done"] == 210 and not summary["failed"]
    assert [bad["line"] for bad in summary["bad_lines"]] == [len(rows) + 1]  # the duplicate merged, not bad
    ledger = Ledger(tmp_path / "batch" / "ledger.sqlite")
    rows_by_job = list(ledger.jobs())
    ledger.close()
    assert {row["agent"] for row in rows_by_job} == {"claude-code", "codex", "pi", "openhands", "mini-swe-agent",
                                                      "opencode", "swe-agent"}
    first = next(row for row in rows_by_job if row["line"] == 1 and row["after_step"] == 1)
    assert json.loads(first["duplicate_lines"]) == [len(rows) + 2]
    for row in rows_by_job:
        result = json.loads((tmp_path / "batch" / "runs" / row["run_id"] / "result.json").read_text())
        assert result["phase"] == "prepared" and result["after_step"] == row["after_step"]
    again = run_batch(jobs, tmp_path / "batch", BatchOptions(workers=2))  # everything done: nothing runs
    assert again["counts"]["done"] == 210
    assert not (tmp_path / "batch" / "work").exists() or not any((tmp_path / "batch" / "work").iterdir())


def _replay_batch(tmp_path: Path, count: int, *, pause: float = 0.0) -> tuple[Path, Path]:
    markers = tmp_path / "markers"
    markers.mkdir()
    rows = []
    for index in range(count):
        session, source = _marker_session(tmp_path / "rec", index, markers, pause=pause)
        rows.append({"trajectory": str(session), "after_step": 1 + index % 2, "mode": "replay-only",
                     "workspace_from": str(source)})
    return _jobs(tmp_path / "jobs.jsonl", rows), markers


def _results(batch: Path) -> dict[str, tuple[Any, ...]]:
    ledger = Ledger(batch / "ledger.sqlite")
    rows = {row["identity"]: row for row in ledger.jobs()}
    ledger.close()
    out = {}
    for identity, row in rows.items():
        result = json.loads((batch / "runs" / row["run_id"] / "result.json").read_text())
        observations = json.loads((batch / "runs" / row["run_id"] / "observations.json").read_text())
        out[identity] = (row["status"], result["phase"], result["observations_match"], result["replayed_tool_calls"],
                         [o["exact"] for o in observations["observations"]])
    return out


def test_20_replay_only_jobs_each_run_once_in_their_own_workspace(tmp_path: Path) -> None:
    jobs, markers = _replay_batch(tmp_path, 20)
    summary = run_batch(jobs, tmp_path / "batch", BatchOptions(workers=2))
    assert summary["counts"]["done"] == 20, summary["failed"]
    assert all((markers / str(i)).read_text() == "run\n" for i in range(20))
    results = _results(tmp_path / "batch")
    assert all(r[:3] == ("done", "replayed", "exact") for r in results.values())
    assert sorted(r[3] for r in results.values()) == [1] * 10 + [2] * 10
    assert all((tmp_path / "rec" / f"src-{i}" / "data.txt").read_text() == f"data {i}\n" for i in range(20))
    run_batch(jobs, tmp_path / "batch", BatchOptions(workers=2))  # a rerun executes nothing again
    assert all((markers / str(i)).read_text() == "run\n" for i in range(20))

    pytest.importorskip("ray", reason="ray is not installed (pip install 'forkpoint[ray]')")
    ray_dir = Path(tempfile.mkdtemp(prefix="fp-ray-"))  # Ray's unix sockets need a short path
    for marker in markers.iterdir():
        marker.unlink()
    try:
        ray_summary = run_batch(jobs, tmp_path / "ray-batch",
                                BatchOptions(workers=2, executor="ray", ray_temp_dir=str(ray_dir)))
    finally:
        shutil.rmtree(ray_dir, ignore_errors=True)
    assert ray_summary["counts"]["done"] == 20, ray_summary["failed"]
    assert _results(tmp_path / "ray-batch") == results  # the same per-job results as the local pool
    assert all((markers / str(i)).read_text() == "run\n" for i in range(20))


def test_kill_9_of_the_driver_then_rerun_never_executes_a_job_twice(tmp_path: Path) -> None:
    jobs, markers = _replay_batch(tmp_path, 8, pause=1.5)
    batch = tmp_path / "batch"
    command = [sys.executable, "-m", "forkpoint.cli", "batch", str(jobs), "--out", str(batch), "--workers", "2"]
    marker = f"FORKPOINT_TEST_BATCH={tmp_path.name}"  # inherited by every process the driver starts
    env = {**os.environ, "FORKPOINT_TEST_BATCH": tmp_path.name}
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                              env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list(markers.iterdir())) < 3:
        time.sleep(0.1)
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    # the workers and the tool commands they ran go with the driver: none may outlive it
    deadline = time.monotonic() + 30
    while _carrying(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _carrying(marker) == []
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode in (0, 1), done.stderr
    summary = status(batch)
    assert summary["counts"]["done"] + summary["counts"]["ambiguous"] == 8 and summary["counts"]["failed"] == 0
    ambiguous = {job["identity"] for job in summary["failed"] if job["status"] == "ambiguous"}
    for ran in markers.iterdir():
        assert ran.read_text() == "run\n", ran  # never two executions
    assert len(list(markers.iterdir())) >= 8 - len(ambiguous)
    for job in summary["failed"]:
        assert job["status"] == "ambiguous" and "not run again" in job["message"]


@pytest.mark.e2e
def test_continue_batch_with_the_stub_upstream(tmp_path: Path) -> None:
    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed (forkpoint agents install claude-code@2.1.332)")
    fixtures = Path(__file__).parents[1] / "fixtures" / "claude_code" / "2.1.332"
    rows = [{"trajectory": str(fixtures / scenario / "session.jsonl"), "after_step": "all", "mode": "continue",
             "upstream": "stub", "workspace_from": str(fixtures / scenario / "workspace-initial")}
            for scenario in ("single_bash", "file_tools")]
    summary = run_batch(_jobs(tmp_path / "jobs.jsonl", rows), tmp_path / "batch", BatchOptions(workers=2))
    assert summary["counts"]["done"] == 6, summary["failed"]
    ledger = Ledger(tmp_path / "batch" / "ledger.sqlite")
    rows_done = list(ledger.jobs())
    ledger.close()
    assert {(row["phase"], row["agent_status"]) for row in rows_done} == {("continued", "completed")}
    for row in rows_done:  # each in its own workspace (path-mapped), the gate validated the first request
        result = json.loads((tmp_path / "batch" / "runs" / row["run_id"] / "result.json").read_text())
        assert result["metadata"]["model_bridge"]["validated"] >= 1 and result["metadata"]["path_rewrites"] is not None
        assert result["metadata"]["sandbox"]["workspace"].startswith(str(tmp_path / "batch" / "work"))


def test_a_continue_batch_sums_each_jobs_model_calls_and_tokens_in_the_ledger(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The tokens a batch spent, per job and in all: what ScriptedModel's answers reported, through the real
    claude and the bridge's usage tap, into each worker's outcome and the ledger."""
    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed (forkpoint agents install claude-code@2.1.332)")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted-upstream-key")
    fixture = Path(__file__).parents[1] / "fixtures" / "claude_code" / "2.1.332" / "single_bash"
    model = ScriptedModel([])  # every request: the final answer, with its usage
    with model.serve() as url:
        rows = [{"trajectory": str(fixture / "session.jsonl"), "after_step": "all", "mode": "continue",
                 "upstream": "anthropic", "upstream_url": url, "workspace_from": str(fixture / "workspace-initial")}]
        summary = run_batch(_jobs(tmp_path / "jobs.jsonl", rows), tmp_path / "batch", BatchOptions(workers=2))
    assert summary["failed"] == [] and summary["counts"]["done"] >= 1
    reported = model.reported_usage()
    assert reported["calls"] >= summary["counts"]["done"] and reported["input_tokens"] > 0
    assert summary["model_usage"] == {"model_calls": reported["calls"], "input_tokens": reported["input_tokens"],
                                      "output_tokens": reported["output_tokens"],
                                      "cached_tokens": reported["cached_tokens"],
                                      "reasoning_tokens": reported["reasoning_tokens"]}
    ledger = Ledger(tmp_path / "batch" / "ledger.sqlite")
    jobs = list(ledger.jobs())
    ledger.close()
    for job in jobs:  # each row: its own run's model_usage
        result = json.loads((tmp_path / "batch" / "runs" / job["run_id"] / "result.json").read_text())
        usage = result["metadata"]["model_usage"]
        assert (job["model_calls"], job["input_tokens"], job["output_tokens"]) == (
            usage["calls"], usage["input_tokens"], usage["output_tokens"]) and job["model_calls"] >= 1


def test_ctrl_c_lets_running_jobs_finish_and_a_rerun_resumes(tmp_path: Path) -> None:
    jobs, markers = _replay_batch(tmp_path, 6, pause=1.0)
    batch = tmp_path / "batch"
    command = [sys.executable, "-m", "forkpoint.cli", "batch", str(jobs), "--out", str(batch), "--workers", "2"]
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not _a_job_runs(batch):  # Ctrl-C while a job runs: it finishes, the rest wait for the rerun
        assert driver.poll() is None and time.monotonic() < deadline, "no job started"
        time.sleep(0.05)
    driver.send_signal(signal.SIGINT)
    _, stderr = driver.communicate(timeout=120)
    assert driver.returncode == 130, stderr
    first = status(batch)["counts"]
    assert first["running"] == 0 and first["failed"] == 0 and first["ambiguous"] == 0
    assert 1 <= first["done"] < 6 and first["pending"] == 6 - first["done"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert status(batch)["counts"]["done"] == 6
    assert all((markers / str(i)).read_text() == "run\n" for i in range(6))


def test_a_relative_out_as_documented_runs_local_replay_only_claude_and_codex_jobs(tmp_path: Path) -> None:
    """`--out batch/` (docs/scale.md): every path-mapped job once failed with "path_map entry ...: both paths must
    be absolute". The driver resolves the batch dir and jobs file at start; each job replays in its own workspace
    under the batch dir, and the recorded workspaces stay as they were."""
    samples = [_samples(tmp_path / "samples", 1)[index] for index in (0, 1)]  # claude-code 0, codex 0
    assert [sample.adapter for sample in samples] == ["claude-code", "codex"]
    rows = [{"trajectory": str(sample.trajectory.relative_to(tmp_path)), "agent": sample.adapter, "after_step": 1,
             "mode": "replay-only", "workspace_from": str(sample.workspace.relative_to(tmp_path))}
            for sample in samples]
    _jobs(tmp_path / "jobs.jsonl", rows)
    done = subprocess.run([sys.executable, "-m", "forkpoint.cli", "batch", "jobs.jsonl", "--out", "batch/",
                           "--workers", "2", "--json"], capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["counts"]["done"] == 2 and summary["failed"] == [], summary
    for sample in samples:
        assert not any(marker.exists() for marker in sample.markers)  # replayed in the private workspace
    ledger = Ledger(tmp_path / "batch" / "ledger.sqlite")
    run_ids = [row["run_id"] for row in ledger.jobs()]
    ledger.close()
    for run_id in run_ids:
        result = json.loads((tmp_path / "batch" / "runs" / run_id / "result.json").read_text())
        assert result["phase"] == "replayed" and result["metadata"]["path_rewrites"] is not None


def test_a_ledger_naming_a_run_id_outside_the_batch_dir_never_gets_it_deleted(tmp_path: Path) -> None:
    """A shipped batch dir whose ledger says a job was left running as ``../../victim``: settling it must not
    remove ``<batch>/runs/../../victim`` (a folder of the user's); the job is reported, not touched."""
    jobs, _ = _replay_batch(tmp_path, 1)
    batch = tmp_path / "batch"
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("years of work\n")
    for folder in ("runs", "state", "work"):  # as in any batch dir that ran jobs
        (batch / folder).mkdir(parents=True)
    ledger = Ledger(batch / "ledger.sqlite")
    ledger.add_jobs(item for item in expand(read_lines(jobs, {})) if isinstance(item, Job))
    ledger.db.execute("UPDATE jobs SET status = 'running', attempts = 1, run_id = '../../victim'")
    ledger.close()
    summary = run_batch(jobs, batch, BatchOptions(workers=1))
    assert (victim / "thesis.tex").read_text() == "years of work\n"
    (job,) = summary["failed"]
    assert job["status"] == "ambiguous" and "not one forkpoint gives" in job["message"]


def test_a_job_can_require_a_verified_version(tmp_path: Path) -> None:
    """Issue 28: by default a recording of an unverified version prepares (degraded); the job key
    ``require_verified_version`` restores the exact-pin refusal for that job only."""
    from forkpoint.testing.claude_sessions import simple_session

    old = simple_session(2, version="2.0.27").write(tmp_path / "old.jsonl")
    rows = [{"trajectory": str(old), "agent": "claude-code", "after_step": 1},
            {"trajectory": str(old), "agent": "claude-code", "after_step": 2, "require_verified_version": True}]
    summary = run_batch(_jobs(tmp_path / "jobs.jsonl", rows), tmp_path / "batch", BatchOptions(workers=1))
    assert summary["counts"]["done"] == 1 and [job["category"] for job in summary["failed"]] == ["unsupported_version"]
    ledger = Ledger(tmp_path / "batch" / "ledger.sqlite")
    done = next(row for row in ledger.jobs() if row["after_step"] == 1)
    ledger.close()
    result = json.loads((tmp_path / "batch" / "runs" / done["run_id"] / "result.json").read_text())
    assert (result["quality"], result["recorded_version_status"]) == ("degraded", "unverified")


def test_require_sandbox_refuses_a_job_that_would_run_commands_on_the_host(tmp_path: Path) -> None:
    """``--require-sandbox bwrap``: a replay-only job in the local sandbox is a bad line and runs nothing (its
    marker is never written); a prepare-only job executes nothing and is allowed."""
    markers = tmp_path / "markers"
    markers.mkdir()
    session, source = _marker_session(tmp_path / "rec", 0, markers)
    jobs = _jobs(tmp_path / "jobs.jsonl", [
        {"trajectory": str(session), "after_step": 1, "mode": "replay-only", "workspace_from": str(source)},
        {"trajectory": str(session), "after_step": 2, "mode": "prepare-only"}])
    bad: list[tuple[int, str]] = []
    summary = run_batch(jobs, tmp_path / "batch", BatchOptions(workers=1, require_sandbox="bwrap"),
                        on_bad=lambda line, reason: bad.append((line, reason)))
    assert summary["counts"]["done"] == 1 and summary["bad_lines"], summary
    assert bad and bad[0][0] == 1 and "requires --sandbox bwrap" in bad[0][1] and "is local" in bad[0][1]
    assert not (markers / "0").exists()


_LEASE_HOLDER = """
import sys
from pathlib import Path
from forkpoint.batch.lock import job_lease
from forkpoint.run.journal import Journal

batch, run_id = Path(sys.argv[1]), sys.argv[2]
with job_lease(batch, run_id, None):
    print("held", flush=True)
    sys.stdin.readline()  # the test says when this job starts its tool
    with Journal.open(batch / "state" / run_id) as journal:
        journal.append("tool_started", call="toolu_0001")
"""


def test_a_lost_job_is_settled_only_once_its_process_no_longer_holds_its_lease(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool fails every in-flight job the moment one worker dies and only then terminates the others (a Ray
    node counted lost may still run its task): the driver must not read a job's journal while its process still
    runs — "nothing started" then is no proof, and the retry would run beside the original."""
    import forkpoint.batch as batch_module

    session, source = _marker_session(tmp_path / "rec", 0, tmp_path)
    [job] = [item for item in expand(read_lines(
        _jobs(tmp_path / "jobs.jsonl", [{"trajectory": str(session), "after_step": 1, "mode": "replay-only",
                                         "workspace_from": str(source)}]), {})) if isinstance(item, Job)]
    batch = tmp_path / "batch"
    (batch / "state").mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", _LEASE_HOLDER, str(batch), job.run_id], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        monkeypatch.setattr(batch_module, "LOST_LEASE_WAIT_S", 0.3, raising=False)
        # its process still runs it: not settled (left running, a later driver settles it)
        assert batch_module._lost(job, job.run_id, RuntimeError("node lost"), batch) is None
        monkeypatch.setattr(batch_module, "LOST_LEASE_WAIT_S", 120.0, raising=False)
        assert holder.stdin is not None
        holder.stdin.write("go\n")  # the job starts its tool, then its process ends
        holder.stdin.flush()
        settled = batch_module._lost(job, job.run_id, RuntimeError("node lost"), batch)
    finally:
        holder.kill()
        holder.communicate()
    assert settled is not None and (settled.category, settled.retryable) == ("ambiguous_execution", False)


def test_a_lost_job_whose_branches_had_started_is_ambiguous(tmp_path: Path) -> None:
    """A branched job's continuations journal their starts in the branches' own journals; its run journal's
    ``branches_started`` alone (a prefix whose observations were all reused ran no tool) is proof enough."""
    from forkpoint.batch import _lost
    from forkpoint.run.journal import Journal

    session, source = _marker_session(tmp_path / "rec", 0, tmp_path)
    [job] = [item for item in expand(read_lines(
        _jobs(tmp_path / "jobs.jsonl", [{"trajectory": str(session), "after_step": 1, "mode": "continue",
                                         "branches": 2, "workspace_from": str(source)}]), {}))
        if isinstance(item, Job)]
    with Journal.open(tmp_path / "batch" / "state" / job.run_id) as journal:
        journal.append("branches_started", count=2)
    settled = _lost(job, job.run_id, RuntimeError("node lost"), tmp_path / "batch")
    assert settled is not None and (settled.category, settled.retryable) == ("ambiguous_execution", False)


def _one_call_session(root: Path) -> tuple[Path, Path]:
    """A one-call Claude session recorded at a path that does not exist (the batch path-maps it) and the
    workspace to create from."""
    initial = root / "initial"
    initial.mkdir()
    (initial / "data.txt").write_text("data\n")
    builder = ClaudeSessionBuilder(session_id="00000000-0000-4000-8000-000000000001", cwd=str(root / "rec" / "ws"))
    builder.user_prompt("go")
    builder.assistant([text("x"), tool_use("toolu_0001", "Bash", {"command": "cat data.txt"})])
    builder.results({"toolu_0001": "data"})
    builder.assistant([text("Done.")])
    return builder.write(root / "session.jsonl"), initial


@pytest.mark.e2e
def test_a_job_whose_every_branch_failed_is_failed_and_one_with_some_failed_is_done_but_partial(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Branches the upstream refuses (ScriptedModel answers their prompt with HTTP 400): a job whose branches all
    failed was recorded ``done``, exit 0 — now ``failed`` with the branches' category; a job with one of two failed
    is ``done`` and listed as partial with its counts."""
    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed (forkpoint agents install claude-code@2.1.332)")
    from forkpoint.testing.script import Fault, Turn
    from forkpoint.testing.script import text as answer

    monkeypatch.setenv("ANTHROPIC_API_KEY", "scripted-upstream-key")
    session, initial = _one_call_session(tmp_path)
    def refused() -> list[Turn]:  # every request of the branch refused (a turn's faults are its own)
        return [Turn((answer("no"),), faults=(Fault(400),) * 50) for _ in range(4)]

    model = ScriptedModel([], keyed={"Take ALPHA.": [], "Take BRAVO.": refused(), "Take CHARLIE.": refused()})
    with model.serve() as url:
        rows = [{"trajectory": str(session), "after_step": 1, "mode": "continue", "upstream": "anthropic",
                 "upstream_url": url, "workspace_from": str(initial), "branches": 2, "branch_prompts": prompts}
                for prompts in (["Take ALPHA.", "Take BRAVO."], ["Take BRAVO.", "Take CHARLIE."])]
        summary = run_batch(_jobs(tmp_path / "jobs.jsonl", rows), tmp_path / "batch",
                            BatchOptions(workers=2, retries=0))
    assert summary["counts"]["done"] == 1 and summary["counts"]["failed"] == 1, summary
    [failed] = summary["failed"]
    assert (failed["line"], failed["category"], failed["exit_code"], failed["retryable"]) == (
        2, "continuation_error", 40, 0), failed
    assert failed["message"].startswith("all 2 branches failed (continuation_error x2)"), failed["message"]
    [partial] = summary["partial"]
    assert (partial["line"], partial["branches"], partial["branches_failed"]) == (1, 2, 1), partial
    assert partial["message"] == "partial: 1 of 2 branches failed (continuation_error x1)"
    result = json.loads((tmp_path / "batch" / "runs" / failed["run_id"] / "result.json").read_text())
    assert result["failure"]["category"] == "continuation_error" and result["metadata"]["branches"]["failed"] == 2
