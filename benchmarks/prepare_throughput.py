"""2. In-process prepare-only throughput on the prefix-fidelity samples (target: ≤ 1 ms per trajectory).

Per trajectory, in one process, every round shuffling (sample, task) pairs:

* floor: read the file and orjson-parse every line (the least any prepare must do; a one-document format —
  OpenHands' trajectory.json, mini-swe-agent's .traj.json, OpenCode's export, SWE-agent's .traj: read + one
  orjson parse);
* parse: ``adapter.parse`` (includes the source SHA-256);
* adapter prepare: parse + ``profile_for`` + ``plan.select_boundary`` + ``write_prepared_prefix`` (atomic write);
* engine prepare: ``forkpoint.run.engine.execute(build_request({... "prepare_only": True}))``: the same plus request
  validation, the fsync'd state journal, run-dir allocation, manifest / summary / result JSON and the event copy.
"""

from __future__ import annotations

import cProfile
import io
import itertools
import pstats
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c
from _samples import ADAPTERS, DOCUMENT_FORMATS, Sample, make

from forkpoint.adapters import get_adapter
from forkpoint.core.model import Mode
from forkpoint.run import plan as planning
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request

TARGET_S = 0.001
TASKS = ("floor", "parse", "adapter", "engine")
#: formats that are one JSON document rather than JSON lines (their floor: read + one orjson parse)
WHOLE_DOCUMENT = DOCUMENT_FORMATS


def tasks_for(sample: Sample, root: Path) -> dict[str, Callable[[], None]]:
    adapter = get_adapter(sample.adapter)
    counter = itertools.count()

    def floor() -> None:
        if sample.adapter in WHOLE_DOCUMENT:
            orjson.loads(sample.trajectory.read_bytes())
            return
        with sample.trajectory.open("rb") as handle:
            for line in handle:
                orjson.loads(line)

    def parse() -> None:
        adapter.parse(sample.trajectory)

    def prepare() -> None:
        parsed = adapter.parse(sample.trajectory)
        plan = planning.select_boundary(parsed, 1, Mode.PREPARE_ONLY, adapter.profile_for(parsed))
        adapter.write_prepared_prefix(plan, root / "adapter" / f"{sample.adapter}-{sample.index}-{next(counter)}")

    def engine() -> None:
        result = execute(build_request({
            "agent": sample.adapter, "trajectory": str(sample.trajectory), "after_step": 1, "prepare_only": True,
            "workspace": str(sample.workspace), "state_dir": str(root / "state"), "output_dir": str(root / "out"),
            "run_id": f"{sample.adapter}-{sample.index}-{next(counter)}"}, source="bench"))
        if result.failure is not None:
            raise RuntimeError(f"{sample.trajectory}: {result.failure}")

    return {"floor": floor, "parse": parse, "adapter": prepare, "engine": engine}


def profiled(call: Callable[[], None]) -> pstats.Stats:
    profiler = cProfile.Profile()
    profiler.enable()
    call()
    profiler.disable()
    return pstats.Stats(profiler, stream=io.StringIO())


def fsync_cost(stats: pstats.Stats, runs: int) -> str:
    """fsync calls and self time per run, from a profile of ``runs`` runs."""
    for (_file, _line, name), (_, ncalls, tottime, _cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        if name == "<built-in method posix.fsync>":
            return f"{ncalls / runs:.0f} fsync calls, {tottime * 1000 / runs:.2f} ms"
    return "no fsync"


def top_functions(stats: pstats.Stats, count: int = 8) -> list[str]:
    rows = []
    for (filename, line, name), (_, calls, tottime, _cum, _) in sorted(
            stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:count]:  # type: ignore[attr-defined]
        where = filename.replace(str(c.ROOT / "src") + "/", "").split("/site-packages/")[-1]
        rows.append(f"`{where}:{line}({name})` {tottime * 1000:.1f} ms ({calls} calls)")
    return rows


def main() -> None:
    args = c.finish_args(c.parser(__doc__ or "", repeat=20).parse_args())
    count = 2 if args.smoke else 20
    rng = random.Random(args.seed)
    times: dict[tuple[str, str], list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-throughput-") as tmp:
        root = Path(tmp)
        samples = [make(adapter, index, root / "samples") for adapter in ADAPTERS for index in range(count)]
        tasks = {(s.adapter, s.index): tasks_for(s, root) for s in samples}
        for sample in samples:  # warm-up: imports, page cache
            for task in TASKS:
                tasks[(sample.adapter, sample.index)][task]()
        for _ in range(args.repeat):
            order = [(s, task) for s in samples for task in TASKS]
            rng.shuffle(order)
            for sample, task in order:
                started = time.perf_counter()
                tasks[(sample.adapter, sample.index)][task]()
                times[(sample.adapter, task)].append(time.perf_counter() - started)
        profile_rounds = 1 if args.smoke else 20
        claude = [s for s in samples if s.adapter == "claude-code"]
        runs = profile_rounds * len(claude)
        stats = {}
        for task in ("adapter", "engine"):
            calls = [tasks[(s.adapter, s.index)][task] for s in claude]

            def rounds(calls: list[Callable[[], None]] = calls) -> None:
                for _ in range(profile_rounds):
                    for call in calls:
                        call()

            stats[task] = profiled(rounds)
        hot = top_functions(stats["engine"])
        sizes = ", ".join(f"{adapter} {kb(min(s.trajectory.stat().st_size for s in samples if s.adapter == adapter))}–"
                          f"{kb(max(s.trajectory.stat().st_size for s in samples if s.adapter == adapter))} KB"
                          for adapter in ADAPTERS)

    labels = {"floor": "floor: read + orjson every line", "parse": "adapter.parse",
              "adapter": "adapter prepare (parse + select + write)", "engine": "engine.execute prepare-only"}
    rows = []
    for adapter in ADAPTERS:
        floor = c.median(times[(adapter, "floor")])
        for task in TASKS:
            values = times[(adapter, task)]
            whole = task == "floor" and adapter in WHOLE_DOCUMENT
            label = "floor: read + orjson the document" if whole else labels[task]
            target = c.verdict(c.median(values) <= TARGET_S) if task in ("adapter", "engine") else ""
            rows.append([adapter, label, len(values), c.ms(c.median(values)), c.ms(c.p95(values)),
                         c.ratio(c.median(values), floor), f"{1 / c.median(values):,.0f}", target])
    body = c.table(["adapter", "per trajectory", "n", "median ms", "p95 ms", "/ floor", "trajectories/s",
                    "≤ 1 ms target"], rows)
    engine_share = {adapter: c.median(times[(adapter, "engine")]) - c.median(times[(adapter, "adapter")])
                    for adapter in ADAPTERS}
    body += f"""

{count} generated 2-batch trajectories per adapter (the prefix-fidelity samples of all {len(ADAPTERS)} adapters, the
verified versions of each agent alternating), after_step 1, {args.repeat} rounds after one warm-up round, each round
in a fresh seeded shuffle of (sample, task). Sizes: {sizes}.
The floor of the one-document formats (OpenHands, mini-swe-agent, OpenCode, SWE-agent) is reading the file + one
orjson parse; their adapters parse it whole and write the cut as a new document (SWE-agent and mini-swe-agent with
the agent's own `json.dumps(indent=2)`).

The engine adds {', '.join(f'{a} {ms_of(v)} ms' for a, v in engine_share.items())} (median) on top of the adapter
work: request validation, workspace check, the fsync'd state journal (open + appends, each `fsync`'d),
exclusive run-dir creation and the manifest / summary / result / event-copy writes (each an atomic
temp + fsync + rename + directory fsync). Durability cost per trajectory (cProfile, claude-code, self time):
adapter prepare {fsync_cost(stats["adapter"], runs)}; engine.execute {fsync_cost(stats["engine"], runs)}.

Where engine.execute spends its time (cProfile, claude-code samples × {profile_rounds} rounds, top self time):

""" + "\n".join(f"- {row}" for row in hot)
    c.emit("prepare_throughput", "2. In-process prepare-only throughput", body, args)


def kb(size: int) -> str:
    return f"{size / 1024:.0f}" if size >= 10240 else f"{size / 1024:.1f}"


def ms_of(seconds: float) -> str:
    return c.ms(seconds)


if __name__ == "__main__":
    main()
