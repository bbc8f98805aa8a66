"""3. Scaling: prepare-only of large Claude sessions vs reading + orjson-parsing the same file.

Generated Claude Code sessions of 1, 10 and 100 MB (many batches, outputs of 2–48 KB, some parallel batches),
cut after the LAST complete batch (the prefix is nearly the whole file). Every measurement is a fresh child
process (``scaling.py --child MODE ...``) that imports everything first, then times one operation and reports
its peak-RSS growth:

* floor: read the file and ``orjson.loads`` every line (nothing kept) — the baseline of the targets;
* floor_copy (for reference): the floor plus writing every line to a new file and one ``fsync``, i.e. the least
  any prepare that writes its prefix must do;
* parse (for the split): ``adapter.parse`` alone (SHA-256 of the source, orjson of every line, what it keeps);
* adapter: ``adapter.parse`` + ``select_boundary`` + ``write_prepared_prefix``;
* engine: ``engine.execute`` prepare-only (the same plus journal, run dir and result files).

Targets: time ≤ 2× the floor, peak memory growth ≤ 3× the file size. Modes alternate in a shuffled order per
round. Peak memory = the process's VmHWM after the operation − its VmRSS before it (/proc/self/status).
``--smoke``: 1 MB only.
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

MODES = ("floor", "floor_copy", "parse", "adapter", "engine")
SIZES_MB = (1, 10, 100)


def generate(path: Path, size_bytes: int, cwd: str) -> tuple[int, int]:
    """Stream a session of about ``size_bytes`` to ``path``; returns (lines, batches)."""
    rng = random.Random(size_bytes)
    corpus = "".join(f"{n:06d}: {'lorem ipsum dolor sit amet ' * (1 + n % 5)}é✓\n" for n in range(4000))
    builder = ClaudeSessionBuilder(session_id="scaling-0000-4000-8000-000000000000", cwd=cwd)
    builder.user_prompt("Work through the large repository.")
    written = lines = batches = 0
    with path.open("wb") as handle:
        while written < size_bytes:
            batches += 1
            width = 2 if batches % 10 == 0 else 1
            ids = [f"toolu_{batches:06d}{chr(97 + k)}" for k in range(width)]
            calls = [tool_use(i, "Bash", {"command": f"cat part-{batches}-{k}.txt"}) for k, i in enumerate(ids)]
            builder.assistant([text(f"Step {batches}."), *calls])
            outputs = {}
            for tool_id in ids:
                start = rng.randrange(0, len(corpus) - 50_000)
                outputs[tool_id] = corpus[start:start + rng.randrange(2_000, 48_000)]
            builder.results(outputs)
            for record in builder.records:
                data = orjson.dumps(record) + b"\n"
                handle.write(data)
                written += len(data)
                lines += 1
            builder.records.clear()
        builder.assistant([text("All done.")])
        for record in builder.records:
            handle.write(orjson.dumps(record) + b"\n")
            lines += 1
    return lines, batches


# -- child ----------------------------------------------------------------------------------------------------------


def child_profile(path: Path, out: Path, after: int, count: int = 8) -> None:
    """Print the top self-time functions of one adapter prepare (JSON list of strings)."""
    import cProfile
    import io
    import pstats

    from forkpoint.adapters import get_adapter
    from forkpoint.core.model import Mode
    from forkpoint.run import plan as planning

    adapter = get_adapter("claude-code")

    def prepare(where: Path) -> None:
        parsed = adapter.parse(path)
        plan = planning.select_boundary(parsed, after, Mode.PREPARE_ONLY, adapter.profile_for(parsed))
        adapter.write_prepared_prefix(plan, where)

    prepare(out / "warm-up")  # lazy imports
    profiler = cProfile.Profile()
    profiler.enable()
    prepare(out / "prefix")
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO()).stats  # type: ignore[attr-defined]
    rows = sorted(stats.items(), key=lambda item: item[1][2], reverse=True)[:count]
    print(json.dumps([f"`{Path(file).name}:{line}({name})` {tot * 1000:.0f} ms ({calls} calls)"
                      for (file, line, name), (_, calls, tot, _cum, _) in rows]))


def child(mode: str, path: Path, out: Path, after: int) -> None:
    from forkpoint.adapters import get_adapter
    from forkpoint.core.model import Mode
    from forkpoint.run import plan as planning
    from forkpoint.run.engine import execute
    from forkpoint.run.request import build_request

    adapter = get_adapter("claude-code")
    out.mkdir(parents=True, exist_ok=True)
    before = memory_kb("VmRSS")
    started = time.perf_counter()
    if mode == "floor":
        with path.open("rb") as handle:
            for line in handle:
                orjson.loads(line)
    elif mode == "floor_copy":
        with path.open("rb") as handle, (out / "copy.jsonl").open("wb") as copy:
            for line in handle:
                orjson.loads(line)
                copy.write(line)
            copy.flush()
            os.fsync(copy.fileno())
    elif mode == "parse":
        adapter.parse(path)
    elif mode == "adapter":
        parsed = adapter.parse(path)
        plan = planning.select_boundary(parsed, after, Mode.PREPARE_ONLY, adapter.profile_for(parsed))
        adapter.write_prepared_prefix(plan, out / "prefix")
    else:
        result = execute(build_request({"agent": "claude-code", "trajectory": str(path), "after_step": after,
                                        "prepare_only": True, "workspace": str(out), "state_dir": str(out / "state"),
                                        "output_dir": str(out / "runs"), "run_id": "scaling"}, source="bench"))
        if result.failure is not None:
            raise SystemExit(f"engine failed: {result.failure}")
    elapsed = time.perf_counter() - started
    print(json.dumps({"elapsed": elapsed, "rss_before_kb": before, "rss_peak_kb": memory_kb("VmHWM")}))


def memory_kb(field: str) -> int:
    """VmRSS (now) / VmHWM (peak) of this process from /proc/self/status.

    Not ``getrusage(RUSAGE_SELF).ru_maxrss``: Linux carries it over from the parent across fork + exec, so a
    child of a big parent would start with the parent's peak and under-report its own growth.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


# -- parent ---------------------------------------------------------------------------------------------------------


def measure(mode: str, path: Path, scratch: Path, after: int) -> tuple[float, float]:
    out = scratch / f"out-{mode}"
    try:
        done = subprocess.run([sys.executable, __file__, "--child", mode, str(path), str(out), str(after)],
                              capture_output=True, text=True, timeout=900, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"child {mode} failed: {done.stderr[-2000:]}")
        report = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return report["elapsed"], (report["rss_peak_kb"] - report["rss_before_kb"]) * 1024


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        if sys.argv[2] == "profile":
            child_profile(Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]))
        else:
            child(sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]))
        return
    parser = c.parser(__doc__ or "", repeat=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=None, help="sizes in MB [default: 1 10 100]")
    args = c.finish_args(parser.parse_args())
    sizes = args.sizes or ((1,) if args.smoke else SIZES_MB)
    rng = random.Random(args.seed)
    rows = []
    hot: tuple[str, list[str]] = ("", [])
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-scaling-") as tmp:
        scratch = Path(tmp)
        for size_mb in sizes:
            path = scratch / f"session-{size_mb}mb.jsonl"
            lines, batches = generate(path, size_mb * 1024 * 1024, str(scratch))
            file_size = path.stat().st_size
            from forkpoint.adapters.claude_code.parse import parse_session

            after = parse_session(path).complete_count
            times: dict[str, list[float]] = defaultdict(list)
            memory: dict[str, list[float]] = defaultdict(list)
            measure("floor", path, scratch, after)  # warm the page cache
            for _ in range(args.repeat):
                order = list(MODES)
                rng.shuffle(order)
                for mode in order:
                    elapsed, grown = measure(mode, path, scratch, after)
                    times[mode].append(elapsed)
                    memory[mode].append(grown)
            done = subprocess.run([sys.executable, __file__, "--child", "profile", str(path), str(scratch / "p"),
                                   str(after)], capture_output=True, text=True, timeout=900, check=True)
            shutil.rmtree(scratch / "p", ignore_errors=True)
            hot = (f"{file_size / 1e6:.0f} MB", json.loads(done.stdout.strip().splitlines()[-1]))
            path.unlink()
            floor = c.median(times["floor"])
            for mode in MODES:
                t, m = c.median(times[mode]), max(memory[mode])
                measured = mode in ("adapter", "engine")  # the others are references
                time_ok = c.verdict(t <= 2 * floor) if measured else ""
                mem_ok = c.verdict(m <= 3 * file_size) if measured else ""
                rows.append([f"{file_size / 1e6:.1f} MB ({lines:,} lines, {batches:,} batches)", mode,
                             c.ms(t), c.ms(c.p95(times[mode])), c.ratio(t, floor), time_ok,
                             f"{m / 1e6:.1f}", f"{m / file_size:.2f}×", mem_ok])
            print(f"{size_mb} MB done", file=sys.stderr)
    body = c.table(["session", "mode", "median ms", "p95 ms", "/ floor", "≤ 2× floor", "peak RSS growth MB (max)",
                    "/ file size", "≤ 3× file"], rows)
    body += f"""

{args.repeat} rounds per size; each measurement is a fresh process (imports done before the clock starts), the
modes in a shuffled order per round, after a warm-up read. Peak memory is the process's peak RSS (VmHWM) after
the operation minus its RSS before it (the largest of the rounds). The prefix is cut after the last complete
batch, so prepare-only reads, hashes, parses and rewrites nearly the whole file.

Where an adapter prepare of the {hot[0]} session spends its time (cProfile, one run, top self time):

""" + "\n".join(f"- {row}" for row in hot[1])
    c.emit("scaling", "3. Scaling with session size (prepare-only vs the read+parse floor)", body, args)


if __name__ == "__main__":
    main()
