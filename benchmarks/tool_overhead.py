"""5. Tool re-execution overhead: replay-only of 200 Bash calls vs the same commands run with ``bash -c``.

A Claude Code session recorded in the workspace (session cwd = the workspace path, so ``--sandbox local`` runs
there) with 200 batches of one trivial Bash call each (``echo N``, historical output ``N``). Per round, in an
alternating order (ABBA):

* baseline: ``subprocess.run(["bash", "-c", "echo N"])`` for N = 1..200, in sequence, output captured;
* engine: ``engine.execute`` replay-only after batch 200 (in process: parse, journal with fsync'd
  tool_started / tool_finished per call, the Claude Bash wrapper, observation comparison, rebuilt session);
* wrapper (for reference): the script forkpoint's Claude Bash tool really runs (``shopt`` lines, ``eval`` of the
  command, ``pwd -P`` into a file: Claude's own semantics) through a plain ``subprocess.run``;
* CLI (for reference): the same through ``forkpoint replay --replay-only`` (adds the interpreter start);
* bwrap / image (when bubblewrap is installed): the engine run under ``--sandbox bwrap`` (the host's root,
  read-only) and under ``--sandbox bwrap --image`` (an OCI image this benchmark writes: the host's bash and
  coreutils' needs copied in with their libraries; unpacked once, cached by digest in the run's temp dir).

Target: engine ≤ 1.15× the baseline.

Per adapter (``_agent_tools``): ``--sandbox bwrap`` vs ``local`` per call for every adapter (target: bwrap ≤ 1.3×
local per call); Claude Code and Codex also with one bwrap per command (before). ``--agents a,b`` measures only those
adapters' rows (printed, for merging into the table; the full run takes long: Gemini CLI and Copilot CLI start per
call, OpenHands takes ~20 s per replay).
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import json
import os
import pstats
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _agent_tools
import _common as c

from forkpoint.process import limits
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use
from forkpoint.testing.images import host_programs_root, oci_tarball, tree_layer

TARGET = 1.15


def session(path: Path, workspace: Path, calls: int) -> list[str]:
    builder = ClaudeSessionBuilder(session_id="overhead-0000-4000-8000-000000000000", cwd=str(workspace))
    builder.user_prompt("Count.")
    commands = []
    for n in range(1, calls + 1):
        command = f"echo {n}"
        commands.append(command)
        tool_id = f"toolu_{n:05d}"
        builder.assistant([text(f"{n}"), tool_use(tool_id, "Bash", {"command": command, "description": "count"})])
        builder.results({tool_id: f"{n}"})
    builder.assistant([text("Counted.")])
    builder.write(path)
    return commands


def main() -> None:
    parser = c.parser(__doc__ or "", repeat=5)
    parser.add_argument("--calls", type=int, default=None, help="Bash calls [default: 200; smoke: 8]")
    parser.add_argument("--agent-calls", type=int, default=None,
                        help="bash calls per OpenCode / Pi executor [default: 20; smoke: 2]")
    parser.add_argument("--agents", default=None,
                        help="only the per-adapter table, for these agents (comma-separated, of "
                             f"{', '.join(_agent_tools.AGENTS)}); printed, not written (merge the rows by hand)")
    args = c.finish_args(parser.parse_args())
    if args.agents is not None:
        _adapters_only(args)
        return
    calls = args.calls or (8 if args.smoke else 200)  # smoke: CI time, the same paths
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-tools-") as tmp:
        root = Path(tmp)
        workspace = root / "ws"
        workspace.mkdir()
        trajectory = root / "session.jsonl"
        commands = session(trajectory, workspace, calls)
        runs = itertools.count()

        def request(run_id: str, **extra: object) -> dict[str, object]:
            return {"agent": "claude-code", "trajectory": str(trajectory), "after_step": calls, "replay_only": True,
                    "workspace": str(workspace), "state_dir": str(root / "state"), "output_dir": str(root / "out"),
                    "run_id": run_id, **extra}

        def baseline() -> float:
            started = time.perf_counter()
            for command in commands:
                subprocess.run(["bash", "-c", command], cwd=workspace, capture_output=True, check=True)
            return time.perf_counter() - started

        def wrapper() -> float:
            cwd_file = root / "cwd"
            started = time.perf_counter()
            for command in commands:
                script = ("\\builtin shopt -s expand_aliases 2>/dev/null || true && "
                          "\\builtin shopt -u extglob 2>/dev/null || true && "
                          f"eval {shlex.quote(command)} < /dev/null && pwd -P >| {shlex.quote(str(cwd_file))}")
                subprocess.run(["/bin/bash", "-c", script], cwd=workspace, capture_output=True, check=True)
            return time.perf_counter() - started

        def engine(**extra: object) -> float:
            run_id = f"engine-{next(runs)}"
            started = time.perf_counter()
            result = execute(build_request(request(run_id, **extra), source="bench"))
            elapsed = time.perf_counter() - started
            if result.failure is not None or result.replayed_tool_calls != calls:
                raise RuntimeError(f"replay failed: {result.failure}")
            rows = json.loads((root / "out" / run_id / "observations.json").read_text())["observations"]
            if not all(row["exact"] for row in rows):
                raise RuntimeError("a fresh observation differs from the recorded one")
            return elapsed

        cpu: dict[str, list[float]] = {"engine": [], "uncapped": []}

        def engine_capped() -> float:
            before = os.times()
            elapsed = engine()
            cpu["engine"].append(_cpu_s(before, os.times()))
            return elapsed

        def engine_uncapped() -> float:
            """The same run with no pids cgroup per command (what forkpoint does where none can be made)."""
            saved = limits._hierarchy_now()
            limits._hierarchy = limits._Hierarchy(None, "benchmark reference")
            try:
                before = os.times()
                elapsed = engine()
                cpu["uncapped"].append(_cpu_s(before, os.times()))
                return elapsed
            finally:
                limits._hierarchy = saved

        def cli() -> float:
            argv = [*c.forkpoint_argv(), "replay", "--replay-only", "--json"] + [
                part for key, value in request(f"cli-{next(runs)}").items() if key != "replay_only"
                for part in (f"--{key.replace('_', '-')}", str(value))]
            return c.timed_run(argv, cwd=root)[0]

        tasks = {"baseline": baseline, "wrapper": wrapper, "engine": engine_capped, "uncapped": engine_uncapped,
                 "cli": cli}
        image: Path | None = None
        floor = ""
        if shutil.which("bwrap") is not None:
            image_root = root / "image-root"
            host_programs_root(image_root, ["/bin/bash", "/bin/sh", "/bin/echo"])
            image = oci_tarball(root / "image.tar", [tree_layer(image_root)], env=["PATH=/bin"])
            os.environ["FORKPOINT_IMAGE_CACHE"] = str(root / "images")
            tasks["bwrap"] = lambda: engine(sandbox="bwrap")
            if not args.smoke:  # the smoke run stays as small as before
                tasks["bwrap-per-command"] = lambda: _per_command(lambda: engine(sandbox="bwrap"))
            tasks["image"] = lambda: engine(sandbox="bwrap", image=str(image))
            floor = _bwrap_floor(workspace, 3 if args.smoke else 100)
        samples: dict[str, list[float]] = {name: [] for name in tasks}
        for name in tasks:  # warm-up
            tasks[name]()
        for round_index in range(args.repeat):
            order = list(tasks) if round_index % 2 == 0 else list(reversed(tasks))
            for name in order:
                samples[name].append(tasks[name]())
        profiler = cProfile.Profile()
        profiler.enable()
        engine()
        profiler.disable()
        adapters = _agent_tools.measure(root / "adapters", args.agent_calls or (2 if args.smoke else 20),
                                        min(args.repeat, 4), None if args.smoke else image,
                                        _agent_tools.SMOKE_AGENTS if args.smoke else _agent_tools.AGENTS)
    stats = pstats.Stats(profiler)
    hot = sorted(stats.stats.items(), key=lambda item: item[1][2], reverse=True)[:8]  # type: ignore[attr-defined]
    total = sum(value[2] for value in stats.stats.values())  # type: ignore[attr-defined]
    cumulative: dict[str, tuple[int, float]] = {}
    for (_file, _line, name), (_, ncalls, _tot, cum, _) in stats.stats.items():  # type: ignore[attr-defined]
        if name in ("_scan_proc", "<built-in method posix.fsync>", "<built-in method _posixsubprocess.fork_exec>"):
            cumulative[name] = (ncalls, cum)
    processes = sum(1 for entry in os.listdir("/proc") if entry.isdigit())

    base = c.median(samples["baseline"])
    labels = {"baseline": f"{calls} × `bash -c 'echo N'` (baseline)",
              "wrapper": f"{calls} × the same through Claude's Bash wrapper, plain `subprocess.run` (reference)",
              "engine": "engine.execute replay-only",
              "uncapped": "the same without a pids cgroup per command (reference)",
              "cli": "`forkpoint replay --replay-only` (whole CLI)",
              "bwrap": "engine.execute replay-only, `--sandbox bwrap` (one bwrap for the replay's commands)",
              "bwrap-per-command": "the same with one bwrap per command (as before; reference)",
              "image": "engine.execute replay-only, `--sandbox bwrap --image` (an image root file system)"}
    rows = []
    for name, values in samples.items():
        target = c.verdict(c.median(values) <= TARGET * base) if name in ("engine", "cli") else (
            f"{c.ratio(c.median(values), c.median(samples['engine']))} of local (goal ≤ 1.3×)"
            if name in ("bwrap", "image", "bwrap-per-command") else "")
        rows.append([labels[name], c.ms(c.median(values)), c.ms(c.p95(values)), c.ratio(c.median(values), base),
                     c.ms((c.median(values) - base) / calls), target])
    cgroup_ms = c.ms((c.median(samples["engine"]) - c.median(samples["uncapped"])) / calls)
    cgroup_cpu_ms = c.ms((c.median(cpu["engine"]) - c.median(cpu["uncapped"])) / calls)
    body = c.table(["run", "median ms", "p95 ms", "/ baseline", "added per call ms", "≤ 1.15× target"], rows)
    body += f"""

{calls} one-call batches, {args.repeat} rounds after a warm-up, alternating order (ABBA); every engine run is checked
(all {calls} calls re-run, every fresh observation exact). The pids cgroup of each command (`--max-processes`,
{limits.metadata()["mechanism"]} here) costs {cgroup_ms} ms of wall time per call (engine minus the reference without
it) and {cgroup_cpu_ms} ms of CPU time (forkpoint and its children, `os.times`: less sensitive to a busy host).

Where a replay-only run spends its time (cProfile of one engine run, {total * 1000:.0f} ms of self time in
total; profiling inflates Python-heavy parts). Cumulative: {'; '.join(
        f"`{name}` {cum * 1000:.0f} ms in {ncalls} calls" for name, (ncalls, cum) in cumulative.items())}, with
{processes} processes in /proc (the supervisor walks only its own subtree, not all of /proc):

""" + "\n".join(
        f"- `{_where(filename)}:{line}({name})` {tottime * 1000:.0f} ms ({ncalls} calls)"
        for (filename, line, name), (_, ncalls, tottime, _cum, _) in hot)
    body += ("\n\n### Per adapter: `--sandbox bwrap` (host root, image root) vs `local` per call (every adapter)\n\n"
             + adapters)
    if floor:
        body += "\n\n### bwrap's own fixed cost per command\n\n" + floor
    c.emit("tool_overhead", "5. Tool re-execution overhead (200 Bash calls)", body, args)


def _adapters_only(args: argparse.Namespace) -> None:
    """``--agents``: the per-adapter rows of the named agents alone (host root, and an image root when bwrap is
    installed), without the 200-call engine runs, printed for merging into the table."""
    agents = tuple(name.strip() for name in args.agents.split(",") if name.strip())
    unknown = [name for name in agents if name not in _agent_tools.AGENTS]
    if unknown or not agents:
        raise SystemExit(f"--agents: unknown {unknown or 'none given'}; known: {', '.join(_agent_tools.AGENTS)}")
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-tools-") as tmp:
        root = Path(tmp)
        image: Path | None = None
        if shutil.which("bwrap") is not None and not args.smoke:
            image_root = root / "image-root"
            host_programs_root(image_root, ["/bin/bash", "/bin/sh", "/bin/echo"])
            image = oci_tarball(root / "image.tar", [tree_layer(image_root)], env=["PATH=/bin"])
            os.environ["FORKPOINT_IMAGE_CACHE"] = str(root / "images")
        table = _agent_tools.measure(root / "adapters", args.agent_calls or (4 if args.smoke else 20),
                                     min(args.repeat, 4), image, agents)
    print(f"### Per adapter ({', '.join(agents)}) — {c.machine_line()}\n\n{table}")


def _per_command(run: Callable[[], float]) -> float:
    """``run`` with one bwrap per replayed command (``FORKPOINT_SANDBOX_EXECUTOR=per-command``: the way before the
    replay's one sandboxed executor), for a side-by-side row."""
    from forkpoint.sandbox.executor import MODE_ENV

    os.environ[MODE_ENV] = "per-command"
    try:
        return run()
    finally:
        os.environ.pop(MODE_ENV, None)


def _bwrap_floor(workspace: Path, n: int) -> str:
    """What one bwrap costs before forkpoint does anything: ``true`` vs ``bwrap --ro-bind / / true`` vs forkpoint's
    own bwrap argv (binds, namespaces, ``--die-with-parent``), each started with ``subprocess.run`` and through the
    supervisor, interleaved in one run (the floor under any per-call ratio of a cheap command)."""
    from forkpoint.process import run_supervised
    from forkpoint.sandbox.bwrap import BwrapSandbox

    bwrap = shutil.which("bwrap") or "bwrap"
    true = shutil.which("true") or "/bin/true"
    ours = BwrapSandbox(workspace, str(workspace)).arguments(str(workspace), network=False)
    argvs = {"`true`": [true], "`bwrap --ro-bind / / true`": [bwrap, "--ro-bind", "/", "/", true],
             "`true` in forkpoint's bwrap argv": [*ours, true]}
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    times: dict[tuple[str, str], list[float]] = {(name, how): [] for name in argvs for how in ("plain", "supervised")}
    flagged = 0
    for _ in range(n):
        for name, argv in argvs.items():
            started = time.perf_counter()
            subprocess.run(argv, cwd=workspace, env=env, capture_output=True, check=True)
            times[(name, "plain")].append(time.perf_counter() - started)
            started = time.perf_counter()
            result = run_supervised(argv, cwd=workspace, env=env, timeout_s=30)
            times[(name, "supervised")].append(time.perf_counter() - started)
            if result.returncode != 0:
                raise RuntimeError(f"{name}: {result}")
            flagged += result.background_cleanup
    base = {how: c.median(times[("`true`", how)]) for how in ("plain", "supervised")}
    rows = [[name, how, c.ms(c.median(values)), c.ms(c.p95(values)), c.ms(c.median(values) - base[how])]
            for (name, how), values in times.items()]
    return str(c.table(["command", "started by", "median ms", "p95 ms", "added by bwrap ms"], rows)) + (
        f"\n\n{n} of each, interleaved. `plain`: `subprocess.run`; `supervised`: `forkpoint.process.run_supervised` "
        "(own session, pids cgroup, exit and process scans). The `added by bwrap` column is the fixed cost of the "
        "sandbox itself (namespaces, mounts, bwrap's exec and its init's exit) that any command run through it pays. "
        f"Supervised runs reported as leaving background work: {flagged} of {n * len(argvs)}.")


def _cpu_s(before: os.times_result, after: os.times_result) -> float:
    """CPU seconds of this process and its waited-for children between two ``os.times``."""
    return float(sum(getattr(after, name) - getattr(before, name)
                     for name in ("user", "system", "children_user", "children_system")))


def _where(filename: str) -> str:
    return filename.replace(str(c.ROOT / "src") + "/", "").split("/lib/python3.11/")[-1]


if __name__ == "__main__":
    main()
