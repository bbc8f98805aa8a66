"""8. Continuation fidelity with ScriptedModel: at every boundary of every real fixture, the REAL agent's first live
action must equal the script's next action (target 100%).

For every recording in tests/fixtures/<adapter>/<version>/<scenario> of every adapter that can continue, and every
boundary N = 1..complete batches: restore ``workspace-initial/`` at the recorded cwd, serve the fixture's own
``script.json`` with ScriptedModel (scripted the way each adapter's tests/e2e/test_<agent>_continue.py does), and run
``engine.execute`` replay + continue of the installed, verified agent through the bridge (the adapter's upstream
protocol pointed at ScriptedModel; ``allow_stale_observations`` so the stale-tool fixtures run too). A case passes
when the run continued (gate validated, nothing refused), every fresh observation matched, and the first live
action has the same tool calls (names and arguments, in order) and the same text as the original action N+1
(next-action.json), and the same tool names as the script's next turn.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c
from _fixtures import ADAPTERS, Fixture, fixtures, replayable_boundary, restored_workspace, versions

from forkpoint import runtimes
from forkpoint.adapters import get_adapter
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing import ScriptedModel


@dataclass(frozen=True)
class Continuation:
    """How an adapter continues against ScriptedModel: the bridge upstream, the key variable forkpoint reads, the
    suffix of ScriptedModel's URL, and ScriptedModel's options (as in the adapter's e2e test)."""

    upstream: str
    key: str
    suffix: str
    model: dict[str, Any] = field(default_factory=dict)
    counter: bool = False  # mini-swe-agent: the script from the boundary on, one turn per request


CONTINUATIONS = {
    "claude-code": Continuation("anthropic", "ANTHROPIC_API_KEY", ""),
    "codex": Continuation("openai-responses", "OPENAI_API_KEY", "/v1"),
    "pi": Continuation("openai-chat", "OPENAI_API_KEY", "/v1", {"model": "scripted-model"}),
    "opencode": Continuation("openai-chat", "OPENAI_API_KEY", "/v1"),
    "mini-swe-agent": Continuation("openai-chat", "OPENAI_API_KEY", "/v1", {"model": "scripted"}, counter=True),
    "openhands": Continuation("openai-chat", "OPENAI_API_KEY", "/v1", {"model": "scripted"}),
}

#: smoke: one cheap case for each kind of continuation this script drives (a resumed CLI, an SDK-resumed agent, a
#: counter-scripted agent): the last boundary of a small recording, one continued step. Every adapter's continuation
#: itself is tested end to end in tests/e2e; the smoke only keeps this script from rotting.
SMOKE = {("claude-code", "2.1.332", "single_bash"), ("pi", "0.83.0", "single_bash"),
         ("mini-swe-agent", "2.4.6", "basic")}


def script_turn(fixture: Fixture, after: int) -> int:
    """The index of the script turn that answers the first continued request."""
    if CONTINUATIONS[fixture.adapter].counter:  # format-error turns count too
        native = get_adapter(fixture.adapter).parse(fixture.trajectory).native
        return int(native.prefix_calls(after))
    return after


def scripted(fixture: Fixture, after: int) -> ScriptedModel:
    how = CONTINUATIONS[fixture.adapter]
    if not how.counter:
        return ScriptedModel.from_file(fixture.path / "script.json", **how.model)
    script = json.loads((fixture.path / "script.json").read_text("utf-8"))
    return ScriptedModel(script["turns"][script_turn(fixture, after):], seed=script["seed"], step_mode="counter",
                         tools_required=script.get("tools_required", False), **how.model)


def script_tools(fixture: Fixture, after: int) -> list[str] | None:
    turns = json.loads((fixture.path / "script.json").read_text("utf-8"))["turns"]
    index = script_turn(fixture, after)
    if index >= len(turns):
        return None
    return [block["name"] for block in turns[index]["content"]
            if block.get("type") in ("tool_use", "custom_tool_call", "function_call")]


def run_case(fixture: Fixture, after: int, root: Path, notes: list[str]) -> tuple[list[str], float]:
    """Problems (empty = pass) and the wall time of the replay + continue; observations worth a note go to notes."""
    how = CONTINUATIONS[fixture.adapter]
    os.environ.setdefault(how.key, "scripted-upstream-key")
    model = scripted(fixture, after)
    run_id = f"{fixture.adapter}-{fixture.version}-{fixture.scenario}-{after}".replace(".", "_")
    with restored_workspace(fixture) as workspace, model.serve() as url:
        started = time.perf_counter()
        try:
            result = execute(build_request({
                "agent": fixture.adapter, "trajectory": str(fixture.trajectory), "after_step": after,
                "allow_stale_observations": True, "workspace": str(workspace), "state_dir": str(root / "state"),
                "output_dir": str(root / "out"), "run_id": run_id, "upstream": how.upstream,
                "upstream_url": url + how.suffix}, source="bench"))
        except Exception as error:  # an adapter bug must show up in the report, not end the benchmark
            return [f"untyped {type(error).__name__}: {str(error)[:200]}"], time.perf_counter() - started
        elapsed = time.perf_counter() - started
    if result.failure is not None:
        return [f"{result.failure.category}: {result.failure.message.splitlines()[0][:200]}"], elapsed
    problems = []
    bridge = result.metadata.get("model_bridge") or {}
    if result.phase != "continued" or not bridge.get("validated") or bridge.get("refused"):
        problems.append(f"phase {result.phase}, bridge {bridge}")
    out = Path(result.output_dir or "")
    rows = json.loads((out / "observations.json").read_text())["observations"]
    different = [row["id"] for row in rows if not (row["exact"] or row["stale_reused"])]
    if different:
        problems.append(f"fresh observations differ: {', '.join(different)}")
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
        names = [tool["name"] for tool in replayed["tools"]]
        if expected and names != expected:
            if metrics.get("same_tool_calls") is True:  # the recording shows the agent's own renaming too
                notes.append(f"{fixture.name} after {after}: the agent turned the script's {expected} into {names}, "
                             "exactly as in the recording")
            else:
                problems.append(f"tools {names} != script turn {expected}")
    return problems, elapsed


def cannot_continue(adapter: str, root: Path) -> str:
    """Why an adapter without a continuation here cannot continue: its own answer to a stub-upstream request."""
    chosen = fixtures((adapter,))
    if not chosen:
        return "no committed fixtures"
    fixture = chosen[0]
    with restored_workspace(fixture) as workspace:
        try:
            result = execute(build_request({
                "agent": adapter, "trajectory": str(fixture.trajectory), "after_step": 1, "upstream": "stub",
                "workspace": str(workspace), "state_dir": str(root / "state"), "output_dir": str(root / "out"),
                "run_id": f"{adapter}-probe"}, source="bench"))
        except Exception as error:
            return f"untyped {type(error).__name__}: {str(error)[:200]}"
    if result.failure is None:
        return "continues with the stub upstream, but no ScriptedModel set-up is known for it here"
    return f"{result.failure.category}: {result.failure.message.splitlines()[0][:600]}"


def main() -> None:
    parser = c.parser(__doc__ or "", repeat=1)
    parser.add_argument("--adapter", action="append", choices=ADAPTERS, help="only these adapters (repeatable)")
    args = c.finish_args(parser.parse_args())
    adapters = tuple(args.adapter or ADAPTERS)
    missing: list[str] = []
    cases: list[tuple[Fixture, int]] = []
    failures: list[str] = []
    refused: list[str] = []
    notes: list[str] = []
    totals: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"cases": 0, "passed": 0, "times": []})
    probed = False
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-continue-") as tmp:
        for adapter in adapters:
            try:
                get_adapter(adapter)
            except Exception as error:
                missing.append(f"{adapter}: adapter not available ({str(error).splitlines()[0][:160]})")
                continue
            if not versions(adapter):
                missing.append(f"{adapter}: no committed fixtures")
                continue
            if adapter not in CONTINUATIONS:
                # the smoke probes one such adapter (a real stub-upstream continuation each, ~10 s: most of the
                # smoke's time when every one was probed); the others are listed unprobed
                why = ("not probed in --smoke" if args.smoke and probed
                       else cannot_continue(adapter, Path(tmp)))
                probed = True
                missing.append(f"{adapter}: cannot continue ({why})")
                continue
            for fixture in fixtures((adapter,)):
                if args.smoke and (fixture.adapter, fixture.version, fixture.scenario) not in SMOKE:
                    continue
                if runtimes.find(fixture.adapter, fixture.version) is None:
                    line = (f"{adapter} {fixture.version}: runtime not installed "
                            f"(`forkpoint agents install {adapter}@{fixture.version}`)")
                    if line not in missing:
                        missing.append(line)
                    continue
                try:
                    parsed = get_adapter(adapter).parse(fixture.trajectory)
                except Exception as error:  # a fixture the parser refuses is a failure, listed below
                    totals[(adapter, fixture.version)]["cases"] += 1
                    failures.append(f"{fixture.name}: parse: {type(error).__name__}: {str(error)[:160]}")
                    continue
                count, why = replayable_boundary(parsed)
                if why:
                    refused.append(f"{fixture.name}: boundaries {count + 1}–{parsed.complete_count} not run; {why}")
                boundaries = ([count] if count else []) if args.smoke else [
                    after for after in range(1, count + 1) if after not in parsed.boundary_refusals]
                skipped = [after for after in range(1, count) if after in parsed.boundary_refusals]
                if skipped and not args.smoke:
                    refused.append(f"{fixture.name}: boundaries {skipped} not run; "
                                   f"{parsed.boundary_refusals[skipped[0]]}")
                cases += [(fixture, after) for after in boundaries]
        for fixture, after in cases:
            key = (fixture.adapter, fixture.version)
            problems, elapsed = run_case(fixture, after, Path(tmp), notes)
            totals[key]["cases"] += 1
            totals[key]["times"].append(elapsed)
            if problems:
                failures.append(f"{fixture.name} after {after}: {'; '.join(problems)}")
            else:
                totals[key]["passed"] += 1
            print(f"{fixture.name} after {after}: {'; '.join(problems) or 'ok'} ({elapsed:.1f} s)", file=sys.stderr)
    rows = []
    for (adapter, version), total in sorted(totals.items(), key=lambda item: (ADAPTERS.index(item[0][0]), item[0])):
        rate = total["passed"] / total["cases"] if total["cases"] else float("nan")
        times = total["times"] or [float("nan")]
        rows.append([adapter, version, total["cases"], total["passed"], f"{rate:.0%}", c.verdict(rate == 1.0),
                     f"{c.median(times):.1f}", f"{c.p95(times):.1f}", f"{max(times):.1f}"])
    body = c.table(["adapter", "version", "boundaries", "first live action = script", "rate", "100% target",
                    "replay + continue median s", "p95 s", "max s"], rows)
    body += "\n\nFailures:\n" + ("\n".join(f"- {line}" for line in failures) if failures else "- none")
    if notes:
        body += "\n\nNotes (passed):\n" + "\n".join(f"- {line}" for line in notes)
    if refused:
        body += "\n\nBoundaries the adapter refuses by design (not counted):\n" + "\n".join(f"- {x}" for x in refused)
    if missing:
        body += "\n\nNot available:\n" + "\n".join(f"- {line}" for line in missing)
    body += """

The wall time covers the whole replay + continue of one boundary: tool re-execution, the rebuilt native
session, starting the real agent (binary or companion runner), its model requests through the gate to
ScriptedModel, and collecting the continued session. Claude's `dangling` fixture is the slowest: its scripted
next action is `echo waiting && sleep 30 && echo finished`, which the continued agent really runs (30 s).
Scripts: each fixture's own `script.json` in conversation mode (turn = assistant turns so far); mini-swe-agent
gets the script from the boundary on in counter mode, as in its e2e test (2.x keeps no assistant message for a
format error). Pi continues from its event stream (`events.jsonl`). The tool-name check against the script turn
applies to structured tool calls; a text-based turn (mini-swe-agent 1.x's ```bash blocks) is checked through the
recording's next action, which that same script produced."""
    if args.adapter:
        body += f"\n\nThis run covered: {', '.join(adapters)}."
    c.emit("continuation_fidelity", "8. Continuation fidelity (real agents + ScriptedModel)", body, args)


if __name__ == "__main__":
    main()
