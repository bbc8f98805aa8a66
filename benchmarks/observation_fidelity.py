"""7. Observation fidelity on the committed real fixtures of every adapter (target: 100% for deterministic tools).

For every recording in tests/fixtures/claude_code/<version>/<scenario> and tests/fixtures/codex/<version>/<scenario>
(written by the real agent binaries): restore ``workspace-initial/`` at the recorded cwd, run
``engine.execute`` replay-only after the LAST complete batch (``allow_stale_observations`` so that calls which
cannot be refreshed are counted instead of refusing the run), and read the run's ``observations.json``:

* exact: the fresh observation equals the historical one byte for byte (and the same error flag);
* normalised: equal after the adapter's documented volatile-part normalisation (e.g. a persisted-output path);
* different: anything else (listed below with its similarity);
* stale: not re-run by design (sub-agents, web, todo...), the recorded observation reused.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c
from _fixtures import Fixture, fixtures, restored_workspace

from forkpoint.adapters import get_adapter
from forkpoint.engine import execute
from forkpoint.request import build_request


def replay(fixture: Fixture, root: Path) -> tuple[list[dict[str, Any]], str | None, float]:
    after = get_adapter(fixture.adapter).parse(fixture.trajectory).complete_count
    if after == 0:
        return [], "no complete batch", 0.0
    with restored_workspace(fixture) as workspace:
        run_id = f"{fixture.adapter}-{fixture.version}-{fixture.scenario}".replace(".", "_")
        started = time.perf_counter()
        result = execute(build_request({
            "agent": fixture.adapter, "trajectory": str(fixture.trajectory), "after_step": after,
            "replay_only": True, "allow_stale_observations": True, "workspace": str(workspace),
            "state_dir": str(root / "state"), "output_dir": str(root / "out"), "run_id": run_id}, source="bench"))
        elapsed = time.perf_counter() - started
    if result.failure is not None:
        return [], f"{result.failure.category}: {result.failure.message.splitlines()[0][:160]}", elapsed
    rows: list[dict[str, Any]] = json.loads((root / "out" / run_id / "observations.json").read_text())["observations"]
    return rows, None, elapsed


def main() -> None:
    args = c.finish_args(c.parser(__doc__ or "", repeat=1).parse_args())
    chosen = fixtures()
    if args.smoke:
        smoke = (("2.1.332", "single_bash"), ("0.149.0", "exec_basic"))
        chosen = [f for f in chosen if (f.version, f.scenario) in smoke]
    totals: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    mismatches: list[str] = []
    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-observations-") as tmp:
        for fixture in chosen:
            rows, failure, elapsed = replay(fixture, Path(tmp))
            key = (fixture.adapter, fixture.version)
            totals[key]["fixtures"] += 1
            totals[key]["ms"] += int(elapsed * 1000)
            if failure is not None:
                totals[key]["failed runs"] += 1
                failures.append(f"{fixture.name}: {failure}")
                continue
            for row in rows:
                totals[key]["calls"] += 1
                if row["stale_reused"]:
                    totals[key]["stale"] += 1
                elif row["exact"] and row.get("normalised"):
                    totals[key]["normalised"] += 1
                elif row["exact"]:
                    totals[key]["exact"] += 1
                else:
                    totals[key]["different"] += 1
                    mismatches.append(f"{fixture.name} batch {row['batch']} `{row['name']}` {row['id']}: similarity "
                                      f"{row['similarity']}, {row['historical_bytes']} → {row['fresh_bytes']} bytes, "
                                      f"error {row['historical_is_error']} → {row['fresh_is_error']}")
            print(f"{fixture.name}: {len(rows)} calls, {failure or 'ok'}", file=sys.stderr)
    rows_out = []
    for (adapter, version), counts in sorted(totals.items()):
        refreshed = counts["exact"] + counts["normalised"] + counts["different"]
        rate = (counts["exact"] + counts["normalised"]) / refreshed if refreshed else float("nan")
        rows_out.append([adapter, version, counts["fixtures"], counts["failed runs"], counts["calls"], counts["exact"],
                         counts["normalised"], counts["different"], counts["stale"],
                         "n/a" if rate != rate else f"{rate:.1%}", "" if rate != rate else c.verdict(rate == 1.0),
                         counts["ms"]])
    body = c.table(["adapter", "version", "fixtures", "failed runs", "calls", "exact", "normalised", "different",
                    "stale (not re-run)", "match rate (re-run calls)", "100% target", "replay ms (total)"], rows_out)
    body += "\n\nMismatches:\n" + ("\n".join(f"- {line}" for line in mismatches) or "- none")
    body += "\n\nRuns that could not replay:\n" + ("\n".join(f"- {line}" for line in failures) or "- none")
    body += """

Match rate = (exact + normalised) / calls that were re-run; stale calls are excluded by design (they are
reported, never silently counted as matches). A failed run counts none of its calls."""
    c.emit("observation_fidelity", "7. Observation fidelity on the real fixtures", body, args)


if __name__ == "__main__":
    main()
