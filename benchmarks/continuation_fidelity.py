"""8. Continuation fidelity with ScriptedModel: at every boundary of every real fixture, the REAL agent's first live
action must equal the script's next action (target 100%).

For every recording in tests/fixtures/<adapter>/<version>/<scenario> and every boundary N = 1..complete batches:
restore ``workspace-initial/`` at the recorded cwd, serve the fixture's own ``script.json`` with ScriptedModel,
and run ``engine.execute`` replay + continue of the installed, verified agent binary through the bridge
(``--upstream anthropic`` / ``openai-responses`` pointed at ScriptedModel; ``allow_stale_observations`` so the
stale-tool fixtures run too). A case passes when the run continued (gate validated, nothing refused), every
fresh observation matched, and the first live action has the same tool calls (names and arguments, in order)
and the same text as the original action N+1 (next-action.json), and the same tool names as script turn N.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c
from _fixtures import Fixture, fixtures, restored_workspace

from forkpoint import runtimes
from forkpoint.adapters import get_adapter
from forkpoint.engine import execute
from forkpoint.request import build_request
from forkpoint.testing import ScriptedModel

#: adapter -> (upstream, the key variable forkpoint reads, the suffix of ScriptedModel's URL)
UPSTREAM = {"claude-code": ("anthropic", "ANTHROPIC_API_KEY", ""),
            "codex": ("openai-responses", "OPENAI_API_KEY", "/v1")}


def script_tools(fixture: Fixture, step: int) -> list[str] | None:
    turns = json.loads((fixture.path / "script.json").read_text("utf-8"))["turns"]
    if step >= len(turns):
        return None
    return [block["name"] for block in turns[step]["content"]
            if block.get("type") in ("tool_use", "custom_tool_call", "function_call")]


def run_case(fixture: Fixture, after: int, root: Path) -> tuple[list[str], float]:
    """Problems (empty = pass) and the wall time of the replay + continue."""
    upstream, key, suffix = UPSTREAM[fixture.adapter]
    os.environ.setdefault(key, "scripted-upstream-key")
    model = ScriptedModel.from_file(fixture.path / "script.json")
    run_id = f"{fixture.adapter}-{fixture.version}-{fixture.scenario}-{after}".replace(".", "_")
    with restored_workspace(fixture) as workspace, model.serve() as url:
        started = time.perf_counter()
        result = execute(build_request({
            "agent": fixture.adapter, "trajectory": str(fixture.trajectory), "after_step": after,
            "allow_stale_observations": True, "workspace": str(workspace), "state_dir": str(root / "state"),
            "output_dir": str(root / "out"), "run_id": run_id, "upstream": upstream,
            "upstream_url": url + suffix}, source="bench"))
        elapsed = time.perf_counter() - started
    if result.failure is not None:
        return [f"{result.failure.category}: {result.failure.message.splitlines()[0][:200]}"], elapsed
    problems = []
    bridge = result.metadata.get("model_bridge") or {}
    if result.phase != "continued" or not bridge.get("validated") or bridge.get("refused"):
        problems.append(f"phase {result.phase}, bridge {bridge}")
    out = Path(result.output_dir or "")
    rows = json.loads((out / "observations.json").read_text())["observations"]
    if not all(row["exact"] or row["stale_reused"] for row in rows):
        problems.append("a fresh observation differs")
    document: dict[str, Any] = json.loads((out / "next-action.json").read_text())
    metrics = document.get("metrics") or {}
    replayed = document.get("replayed")
    if replayed is None:
        problems.append("no live action")
    else:
        if metrics.get("same_tool_calls") is not True:
            problems.append(f"different tool calls: {document.get('original')} vs {replayed}")
        if metrics.get("text_exact") is False:
            problems.append(f"different text (similarity {metrics.get('text_similarity')})")
        expected = script_tools(fixture, after)
        if expected is not None and [tool["name"] for tool in replayed["tools"]] != expected:
            problems.append(f"tools {[tool['name'] for tool in replayed['tools']]} != script turn {after} {expected}")
    return problems, elapsed


def main() -> None:
    args = c.finish_args(c.parser(__doc__ or "", repeat=1).parse_args())
    chosen = fixtures()
    if args.smoke:
        chosen = [f for f in chosen if (f.adapter, f.version, f.scenario) == ("claude-code", "2.1.332", "single_bash")]
    cases = []
    for fixture in chosen:
        count = get_adapter(fixture.adapter).parse(fixture.trajectory).complete_count
        cases += [(fixture, after) for after in range(1, count + 1)]
    if args.smoke:
        cases = cases[:1]
    totals: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"cases": 0, "passed": 0, "times": []})
    failures: list[str] = []
    missing: set[str] = set()
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-continue-") as tmp:
        for fixture, after in cases:
            key = (fixture.adapter, fixture.version)
            if runtimes.find(fixture.adapter, fixture.version) is None:
                missing.add(f"{fixture.adapter}@{fixture.version}")
                continue
            problems, elapsed = run_case(fixture, after, Path(tmp))
            totals[key]["cases"] += 1
            totals[key]["times"].append(elapsed)
            if problems:
                failures.append(f"{fixture.name} after {after}: {'; '.join(problems)}")
            else:
                totals[key]["passed"] += 1
            print(f"{fixture.name} after {after}: {'; '.join(problems) or 'ok'} ({elapsed:.1f} s)", file=sys.stderr)
    rows = []
    for (adapter, version), total in sorted(totals.items()):
        rate = total["passed"] / total["cases"] if total["cases"] else float("nan")
        rows.append([adapter, version, total["cases"], total["passed"], f"{rate:.0%}", c.verdict(rate == 1.0),
                     f"{c.median(total['times']):.1f}", f"{c.p95(total['times']):.1f}", f"{max(total['times']):.1f}"])
    body = c.table(["adapter", "version", "boundaries", "first live action = script", "rate", "100% target",
                    "replay + continue median s", "p95 s", "max s"], rows)
    body += "\n\nFailures:\n" + ("\n".join(f"- {line}" for line in failures) if failures else "- none")
    if missing:
        body += f"\n\nNot installed (skipped): {', '.join(sorted(missing))} (`forkpoint agents install AGENT@VERSION`)."
    body += """

The wall time covers the whole replay + continue of one boundary: tool re-execution, the rebuilt native
session, starting the real agent binary, its model requests through the gate to ScriptedModel, and collecting
the continued session. The slowest case is Claude's `dangling` fixture: its scripted next action is
`echo waiting && sleep 30 && echo finished`, which the continued agent really runs (30 s)."""
    c.emit("continuation_fidelity", "8. Continuation fidelity (real agents + ScriptedModel)", body, args)


if __name__ == "__main__":
    main()
