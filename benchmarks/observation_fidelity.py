"""7. Observation fidelity on the committed fixtures of every adapter (target: 100% for deterministic tools).

For every recording in tests/fixtures/<adapter>/<version>/<scenario> (written by the real agent binaries; SWE-agent's
are constructed by hand, see its README): restore ``workspace-initial/`` at the recorded cwd, run ``engine.execute``
replay-only after the LAST replayable complete batch (the last one with no refused call and no refused boundary;
``allow_stale_observations`` so that calls which cannot be refreshed are counted instead of refusing the run), and
read the run's ``observations.json``:

* exact: the fresh observation equals the historical one byte for byte (and the same error flag);
* normalised: equal after the adapter's documented volatile-part normalisation (e.g. a persisted-output path);
* different: anything else (listed below with its similarity);
* stale: not re-run by design (sub-agents, web, todo...), the recorded observation reused;
* not replayed: calls after the last replayable boundary (refused by design: unknown or bundle tools, submit).

An adapter, version or runtime that is missing is reported as not available.
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
from _fixtures import ADAPTERS, SPECS, Fixture, fixtures, replayable_boundary, restored_workspace, versions

from forkpoint import runtimes
from forkpoint.adapters import get_adapter
from forkpoint.core.model import Trajectory
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request

#: smoke: small recordings of the adapters whose tools forkpoint itself re-runs, plus Pi's (one agent runtime)
SMOKE = {("claude-code", "2.1.332", "single_bash"), ("codex", "0.149.0", "exec_basic"),
         ("swe-agent", "1.1.0", "shell_state"), ("pi", "0.83.0", "single_bash")}


def replay(fixture: Fixture, parsed: Trajectory, after: int, root: Path) -> tuple[list[dict[str, Any]], str | None,
                                                                                  float]:
    with restored_workspace(fixture) as workspace:
        run_id = f"{fixture.adapter}-{fixture.version}-{fixture.scenario}".replace(".", "_")
        started = time.perf_counter()
        try:
            result = execute(build_request({
                "agent": fixture.adapter, "trajectory": str(fixture.trajectory), "after_step": after,
                "replay_only": True, "allow_stale_observations": True, "workspace": str(workspace),
                "state_dir": str(root / "state"), "output_dir": str(root / "out"), "run_id": run_id}, source="bench"))
        except Exception as error:  # an adapter bug must show up in the report, not end the benchmark
            return [], f"untyped {type(error).__name__}: {str(error).splitlines()[0][:160] if str(error) else ''}", 0.0
        elapsed = time.perf_counter() - started
    if result.failure is not None:
        return [], f"{result.failure.category}: {result.failure.message.splitlines()[0][:160]}", elapsed
    rows: list[dict[str, Any]] = json.loads((root / "out" / run_id / "observations.json").read_text())["observations"]
    return rows, None, elapsed


def mismatch_line(fixture: Fixture, row: dict[str, Any]) -> str:
    line = (f"{fixture.name} batch {row['batch']} `{row['name']}` {row['id']}: similarity {row['similarity']}, "
            f"{row['historical_bytes']} → {row['fresh_bytes']} bytes, error {row['historical_is_error']} → "
            f"{row['fresh_is_error']}")
    if fixture.adapter == "openhands" and row["fresh_bytes"] == 0 and row["historical_bytes"]:
        line += (" (OpenHands 0.62.0's CLI runtime lost the whole output of a command that exited before its first"
                 " poll: the documented volatility, docs/adapters/openhands.md)")
    return line


def unavailable(adapter: str) -> str | None:
    try:
        get_adapter(adapter)
    except Exception as error:
        return f"adapter not available ({type(error).__name__}: {str(error).splitlines()[0][:120]})"
    if not versions(adapter):
        return "no committed fixtures"
    return None


def main() -> None:
    args = c.finish_args(c.parser(__doc__ or "", repeat=1).parse_args())
    totals: dict[tuple[str, str], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    mismatches: list[str] = []
    failures: list[str] = []
    partial: list[str] = []
    missing: list[list[str]] = []
    for adapter in ADAPTERS:
        reason = unavailable(adapter)
        if reason is not None:
            missing.append([adapter, "", reason])
    chosen = [f for f in fixtures(tuple(a for a in ADAPTERS if not any(m[0] == a for m in missing)))
              if not args.smoke or (f.adapter, f.version, f.scenario) in SMOKE]
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-observations-") as tmp:
        for fixture in chosen:
            if SPECS[fixture.adapter].needs_runtime and runtimes.find(fixture.adapter, fixture.version) is None:
                entry = [fixture.adapter, fixture.version,
                         f"runtime not installed (`forkpoint agents install {fixture.adapter}@{fixture.version}`)"]
                if entry not in missing:
                    missing.append(entry)
                continue
            key = (fixture.adapter, fixture.version)
            totals[key]["fixtures"] += 1
            try:
                parsed = get_adapter(fixture.adapter).parse(fixture.trajectory)
            except Exception as error:  # a fixture the parser refuses is a failed run, listed below
                totals[key]["failed runs"] += 1
                failures.append(f"{fixture.name}: parse: {type(error).__name__}: {str(error).splitlines()[0][:160]}")
                continue
            after, why = replayable_boundary(parsed)
            total_calls = sum(len(batch.calls) for batch in parsed.batches[: parsed.complete_count])
            in_prefix = sum(len(batch.calls) for batch in parsed.batches[:after])
            totals[key]["not replayed"] += total_calls - in_prefix
            if why:
                partial.append(f"{fixture.name}: replayed to boundary {after} of {parsed.complete_count}; {why}")
            if after == 0:
                continue
            rows, failure, elapsed = replay(fixture, parsed, after, Path(tmp))
            totals[key]["ms"] += int(elapsed * 1000)
            if failure is not None:
                totals[key]["failed runs"] += 1
                failures.append(f"{fixture.name}: {failure}")
                print(f"{fixture.name}: {failure}", file=sys.stderr)
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
                    mismatches.append(mismatch_line(fixture, row))
            print(f"{fixture.name}: {len(rows)} calls after {after}, ok ({elapsed:.1f} s)", file=sys.stderr)
    rows_out = []
    for (adapter, version), counts in sorted(totals.items(), key=lambda item: (ADAPTERS.index(item[0][0]), item[0])):
        refreshed = counts["exact"] + counts["normalised"] + counts["different"]
        rate = (counts["exact"] + counts["normalised"]) / refreshed if refreshed else float("nan")
        kind = "constructed" if SPECS[adapter].constructed else "real"
        rows_out.append([adapter, version, kind, counts["fixtures"], counts["failed runs"], counts["calls"],
                         counts["exact"], counts["normalised"], counts["different"], counts["stale"],
                         counts["not replayed"], "n/a" if rate != rate else f"{rate:.1%}",
                         "" if rate != rate else c.verdict(rate == 1.0 and not counts["failed runs"]), counts["ms"]])
    body = c.table(["adapter", "version", "recordings", "fixtures", "failed runs", "calls re-run or reused", "exact",
                    "normalised", "different", "stale (not re-run)", "not replayed (refused by design)",
                    "match rate (re-run calls)", "100% target", "replay ms (total)"], rows_out)
    if missing:
        body += "\n\nNot available:\n" + "\n".join(f"- {a}{' ' + v if v else ''}: {why}" for a, v, why in missing)
    body += "\n\nMismatches:\n" + ("\n".join(f"- {line}" for line in mismatches) or "- none")
    body += "\n\nRuns that could not replay:\n" + ("\n".join(f"- {line}" for line in failures) or "- none")
    body += "\n\nRecordings replayed only up to a boundary:\n" + ("\n".join(f"- {line}" for line in partial)
                                                                   or "- none")
    body += """

Match rate = (exact + normalised) / calls that were re-run; stale calls are excluded by design (they are
reported, never silently counted as matches), and so are calls after a refused call or boundary (the adapter
refuses to replay them at all: listed above). A failed run counts none of its calls and misses the target.
Pi is replayed from its `--mode json` event stream (`events.jsonl`; its `session.jsonl` holds the same calls).
SWE-agent's recordings are constructed (SWE-agent is not on PyPI): their expected observations were written by
hand, so its row compares forkpoint with an independent expectation rather than with the real agent."""
    c.emit("observation_fidelity", "7. Observation fidelity on the committed fixtures", body, args)


if __name__ == "__main__":
    main()
