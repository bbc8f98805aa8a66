"""9b. Export of scored runs with groups: `forkpoint export` (messages JSONL with the reward/group/advantage columns,
and `--format dpo`) over 10k scored branches — goal ≥ 1,000 runs/s per core (issue 31).

One real branched, scored run is made by the engine: Pi 0.83.0 continued K=4 times from one boundary against
ScriptedModel (each branch edits differently, a `--score` verifier rewards them 1/0), so result.json,
branches.json, each branch's continued session, next action and the replay documents are what forkpoint writes.
It is cloned into N run dirs; in each clone only the run id and the group id differ (every clone is its own
reward group of 4), so N run dirs are 4·N scored runs (rows). Each pass is the whole CLI in a fresh process
(`forkpoint export <dir> --format F --out …`, start-up and imports included); its CPU time (user + sys, from
the child's rusage) gives runs/s per core. A read-only pass over the same files (every JSON document and native
session an export reads, loaded with orjson, nothing converted or written) is the I/O-and-parse floor.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

GOAL_RATE = 1000.0
K = 4
FIXTURE = c.FIXTURES / "pi" / "0.83.0" / "single_bash"
#: branch temperature -> what that branch writes to branch.txt (None: it changes nothing)
BRANCHES = {0.11: "alpha", 0.22: "bravo", 0.33: "charlie", 0.44: None}
VERIFIER = "grep -qx -e alpha -e charlie branch.txt 2>/dev/null && echo 1 || echo 0"

READ_ONLY = """
import json, sys, time
from pathlib import Path
import orjson
from forkpoint.export.runs import find_runs
started = time.perf_counter()
count = 0
for run in find_runs([Path(sys.argv[1])]):
    documents = {}
    for name in ("result.json", "replay-summary.json", "next-action.json", "tool-schemas.json", "branches.json"):
        if (run / name).exists():
            documents[name] = orjson.loads((run / name).read_bytes())
    for path in (run / "native" / "prefix").iterdir():
        path.read_bytes()
    for row in documents["branches.json"]["branches"]:
        branch = run / "branches" / str(row["branch"])
        if (branch / "next-action.json").exists():
            orjson.loads((branch / "next-action.json").read_bytes())
        (branch / "native" / "continued" / row["continued_path"].rsplit("/", 1)[-1]).read_bytes()
        count += 1
print(json.dumps({"rows": count, "seconds": time.perf_counter() - started}))
"""


def make_template(root: Path, k: int = K) -> Path:
    """The real branched, scored run (K branches, Pi + ScriptedModel + a verifier) that every clone copies; the
    first ``k - 1`` temperatures of ``BRANCHES`` and the one that changes nothing (rewards 1 and 0 both occur)."""
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request
    from forkpoint.testing import ScriptedModel
    from forkpoint.testing.recordings import restored_workspace
    from forkpoint.testing.scripted_model import text, tool_use

    os.environ.setdefault("OPENAI_API_KEY", "scripted-upstream-key")
    base = json.loads((FIXTURE / "script.json").read_text())["turns"]
    keyed: dict[str, Sequence[Any]] = {}
    branches = dict([*list(BRANCHES.items())[:k - 1], list(BRANCHES.items())[-1]])
    for temperature, name in branches.items():
        action = [text("nothing to change")] if name is None else [
            tool_use("bash", {"command": f"echo {name} > branch.txt"})]
        keyed[f'"temperature": {temperature}'] = [*base[:1], action, [text(f"{name} done")]]
    model = ScriptedModel(base, keyed=keyed, model="scripted-model")
    with restored_workspace(FIXTURE) as workspace, model.serve() as url:
        result = execute(build_request({
            "agent": "pi", "trajectory": str(FIXTURE / "session.jsonl"), "after_step": 1,
            "workspace": str(workspace), "state_dir": str(root / "state"), "output_dir": str(root / "template"),
            "run_id": "run", "upstream": "openai-chat", "upstream_url": url + "/v1", "branches": k,
            "branch_temperatures": list(branches), "score": VERIFIER}, source="benchmark"))
    if result.failure is not None:
        raise RuntimeError(f"the template run failed: {result.failure}")
    shutil.rmtree(root / "state", ignore_errors=True)
    return root / "template" / "run"


def clone(template: Path, runs: Path, count: int) -> Path:
    """``count`` copies of ``template`` under ``runs``; only the run id and the group id differ."""
    import hashlib

    result = json.loads((template / "result.json").read_text())
    branches = json.loads((template / "branches.json").read_text())
    rewards = [row["score"]["reward"] for row in branches["branches"]]
    if len(set(rewards)) < 2:
        raise RuntimeError(f"the template's branches should differ in reward: {rewards}")
    for index in range(count):
        target = runs / f"run-{index:06d}"
        shutil.copytree(template, target)
        gid = hashlib.sha256(f"group-{index}".encode()).hexdigest()[:16]
        result["run_id"] = target.name
        result["metadata"]["scoring"]["group_id"] = gid
        (target / "result.json").write_text(json.dumps(result))
        for row in branches["branches"]:
            row["group"]["id"] = gid
        branches["group"]["id"] = gid
        (target / "branches.json").write_text(json.dumps(branches))
    return runs


def measure(argv: list[str]) -> tuple[float, float, subprocess.CompletedProcess[str]]:
    """(wall s, CPU s of the child: user + sys, the completed process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime), done


def main() -> None:
    args = c.finish_args(c.parser(__doc__ or "", repeat=3).parse_args())
    count, k = (25, 2) if args.smoke else (2500, K)  # (the smoke: a cheaper template, two branches)
    rows_expected = count * k
    samples: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-export-groups-") as tmp:
        root = Path(tmp)
        template = make_template(root, k)
        runs = clone(template, root / "runs", count)
        dpo_pairs = 0
        for repetition in range(args.repeat):
            for fmt in ("messages-jsonl", "dpo", "read-only floor"):
                out = root / f"out-{repetition}-{fmt}.jsonl"
                if fmt == "read-only floor":
                    wall, cpu, done = measure([sys.executable, "-c", READ_ONLY, str(runs)])
                    rows = json.loads(done.stdout.strip().splitlines()[-1])["rows"]
                else:
                    wall, cpu, done = measure([*c.forkpoint_argv(), "export", str(runs), "--format", fmt,
                                               "--out", str(out)])
                    report = json.loads(Path(f"{out}.report.json").read_text())
                    rows = rows_expected if fmt == "dpo" else report["rows"]
                    if fmt == "dpo":
                        dpo_pairs = report["rows"]
                        if dpo_pairs != count:
                            raise RuntimeError(f"expected one pair per group: {report}")
                    out.unlink()
                    Path(f"{out}.report.json").unlink()
                if rows != rows_expected:
                    raise RuntimeError(f"{fmt}: {rows} rows, expected {rows_expected}")
                samples.setdefault(fmt, []).append((wall, cpu))
    table_rows = []
    verdicts = []
    for fmt, values in samples.items():
        wall, cpu = c.median([v[0] for v in values]), c.median([v[1] for v in values])
        per_core = rows_expected / cpu
        table_rows.append((f"`{fmt}`" if fmt != "read-only floor" else fmt, f"{rows_expected:,}", f"{count:,}",
                           f"{wall:.2f}", f"{cpu:.2f}", f"{rows_expected / wall:,.0f}", f"{per_core:,.0f}",
                           f"{count / cpu:,.0f}"))
        if fmt != "read-only floor":
            verdicts.append(f"`{fmt}` {per_core:,.0f} runs/s/core → {c.verdict(per_core >= GOAL_RATE)}")
    body = c.table(("pass", "scored runs (rows)", "run dirs", "wall s (median)", "CPU s (median)", "runs/s (wall)",
                    "runs/s per core (CPU)", "run dirs/s per core"), table_rows)
    body += (f"\n\nGoal ≥ {GOAL_RATE:,.0f} scored runs/s per core, the whole `forkpoint export` process (start-up "
             f"included): {'; '.join(verdicts)}. {count:,} run dirs of K={k} scored branches each (one reward group "
             f"per run dir; {dpo_pairs:,} DPO pairs, one per group); {args.repeat} repetition(s), each pass a fresh "
             "process; CPU = the child's user + sys time.")
    c.emit("export_groups", "9b. Export of scored runs with groups (messages JSONL, DPO)", body, args)


if __name__ == "__main__":
    main()
