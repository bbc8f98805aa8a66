"""9. Export: generated prepare-only-sized runs exported to parquet — runs/s and the exporter's peak RSS at 1k and
10k runs (goals: ≥ 1,000 runs/s per core; RSS flat in the number of runs).

One real prepare-only run of a generated 2-batch Claude Code session is made by the engine, then cloned into N run
dirs (only the run id differs). Each size is exported in a fresh interpreter (`forkpoint.export.export`, parquet,
redaction on), so its ``ru_maxrss`` is the exporter's own peak; the sizes alternate over the repetitions. The
export is single-threaded: runs/s is per core; the interpreter start and the imports (pyarrow) are not counted.
A read-only pass over the same files (the runs' JSON documents and
native prefixes loaded, nothing converted or written) is measured alongside as the I/O floor.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing.claude_sessions import simple_session

GOAL_RATE = 1000.0
GOAL_RSS_GROWTH = 1.25  # peak RSS at the largest size / at the smallest

EXPORT = """
import json, resource, sys, time
from pathlib import Path
from forkpoint.export import export
from forkpoint.export.rows import ExportOptions
import pyarrow.parquet, forkpoint.adapters.claude_code.messages  # fixed start-up cost, not per-run work
started = time.perf_counter()
report = export([Path(sys.argv[1])], "parquet", Path(sys.argv[2]), ExportOptions())
elapsed = time.perf_counter() - started
print(json.dumps({"rows": report.rows, "seconds": elapsed,
                  "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""

READ_ONLY = """
import json, resource, sys, time
from pathlib import Path
import orjson
from forkpoint.export.runs import find_runs
started = time.perf_counter()
count = 0
for run in find_runs([Path(sys.argv[1])]):
    for name in ("result.json", "replay-summary.json"):
        orjson.loads((run / name).read_bytes())
    for path in (run / "native" / "prefix").iterdir():
        path.read_bytes()
    count += 1
elapsed = time.perf_counter() - started
print(json.dumps({"rows": count, "seconds": elapsed,
                  "rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def make_runs(root: Path, count: int, *, replay: bool = False) -> Path:
    """``count`` copies of one real prepare-only (or, with ``replay``, replay-only) run under ``root/runs-<count>``."""
    template = root / "template"
    if not template.exists():
        builder = simple_session(2)
        workspace = root / "ws"
        workspace.mkdir()
        builder.cwd = str(workspace)
        for record in builder.records:
            record["cwd"] = builder.cwd
        session = builder.write(root / "session.jsonl")
        mode = {"replay_only": True, "workspace": str(workspace)} if replay else {"prepare_only": True}
        result = execute(build_request({
            "agent": "claude-code", "trajectory": str(session), "after_step": 2, **mode,
            "state_dir": str(root / "state"), "output_dir": str(template), "run_id": "run",
        }, source="benchmark"))
        assert result.exit_code == 0, result.failure
    source = template / "run"
    result = json.loads((source / "result.json").read_text())
    runs = root / f"runs-{count}"
    for index in range(count):
        target = runs / f"run-{index:06d}"
        shutil.copytree(source, target)
        result["run_id"] = target.name
        (target / "result.json").write_text(json.dumps(result))
    return runs


def measure(script: str, runs: Path, out: Path) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", script, str(runs), str(out)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    args = c.finish_args(c.parser(__doc__ or "", repeat=3).parse_args())
    sizes = (50, 200) if args.smoke else (1000, 10000)
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-export-") as tmp:
        root = Path(tmp)
        dirs = {size: make_runs(root, size) for size in sizes}
        samples: dict[tuple[str, int], list[dict[str, float]]] = {}
        for repetition in range(args.repeat):
            for size in sizes:
                for kind, script in (("export", EXPORT), ("read-only floor", READ_ONLY)):
                    out = root / f"out-{size}-{repetition}-{kind[0]}.parquet"
                    sample = measure(script, dirs[size], out)
                    assert sample["rows"] == size, sample
                    samples.setdefault((kind, size), []).append(sample)
                    shutil.rmtree(out, ignore_errors=True) if out.is_dir() else out.unlink(missing_ok=True)
                    Path(f"{out}.report.json").unlink(missing_ok=True)
    rows = []
    for (kind, size), values in samples.items():
        rate = c.median([size / v["seconds"] for v in values])
        rss = c.median([v["rss_kib"] / 1024 for v in values])
        rows.append((kind, size, f"{rate:,.0f}", f"{rss:.0f}"))
    export_rss = {size: c.median([v["rss_kib"] for v in samples[("export", size)]]) for size in sizes}
    slowest = min(c.median([size / v["seconds"] for v in samples[("export", size)]]) for size in sizes)
    growth = export_rss[sizes[-1]] / export_rss[sizes[0]]
    body = c.table(("pass", "runs", "runs/s (median)", "peak RSS MiB (median)"), rows)
    body += (f"\n\nExport throughput ≥ {GOAL_RATE:,.0f} runs/s per core: {slowest:,.0f} → "
             f"{c.verdict(slowest >= GOAL_RATE)}. Peak RSS {sizes[-1]:,} vs {sizes[0]:,} runs: {growth:.2f}× → "
             f"{c.verdict(growth <= GOAL_RSS_GROWTH)} (flat = ≤ {GOAL_RSS_GROWTH}×). {args.repeat} repetition(s), "
             "sizes alternated; each pass a fresh interpreter.")
    c.emit("export", "9. Export to parquet (runs/s, peak RSS)", body, args)


if __name__ == "__main__":
    main()
