"""12. Branching: K = 1, 4, 8 continuations of one replay (`--branches K`, stub upstream, real Claude Code under
bwrap) against K separate full replays, side by side; and the boundary snapshot of a 200 MB workspace against a
plain `cp -a` of it.

Goal: K branches cost ≤ one replay + K continuations + 10%, where one continuation's cost is measured in the same
run as (full replay with continuation) − (replay-only); the snapshot ≤ 2× `cp -a` (≈ 0 with reflinks where the
file system has them: the table names the file system). The recording is a constructed Claude Code 2.1.332
session of 20 Bash calls (one per batch, each appending a line to notes.txt and counting the lines), replayed to
its last boundary (20 replayed calls); the real agent resumes it through the stub upstream. Rounds alternate the
measured commands.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, tool_use

CALLS = 20
#: the recorded cwd (under bwrap each run's workspace is mounted there; nothing is written to it on the host)
RECORDED_CWD = "/tmp/forkpoint-bench-branching/workspace"
#: a model this Claude Code recognises: resuming a session of an unknown one adds a warning line to the session
MODEL = "claude-opus-5-5"
GOAL_OVERHEAD = 1.10
GOAL_SNAPSHOT = 2.0


class _Recording(ClaudeSessionBuilder):
    """Record uuids shaped as the agent writes them (UUIDs), numbered in order."""

    def _uuid(self, prefix: str) -> str:
        return f"00000000-0000-4000-8001-{next(self._ids):012x}"


def write_session(path: Path) -> Path:
    """The 20-call recording: a known model, one Bash call and its result per batch."""
    builder = _Recording(session_id="00000000-0000-4000-8000-000000000020", cwd=RECORDED_CWD)
    builder.user_prompt(f"Append {CALLS} numbered lines to notes.txt, one call each.")
    for n in range(1, CALLS + 1):
        tool_id = f"toolu_{n:05d}"
        builder.assistant([text(f"Line {n}."), tool_use(tool_id, "Bash", {
            "command": f"echo 'line {n}' >> notes.txt && wc -l < notes.txt", "description": "append a line"})])
        builder.results({tool_id: f"{n}"})
    builder.assistant([text("Done.")])
    for record in builder.records:
        if record["type"] == "assistant":
            record["message"]["model"] = MODEL
    return builder.write(path)


def replay(root: Path, name: str, *extra: str) -> float:
    workspace = c.fresh_dir(root / f"ws-{name}")
    argv = [*c.forkpoint_argv(), "replay", "--agent", "claude-code", "--trajectory", str(root / "session.jsonl"),
            "--after-step", str(CALLS), "--workspace", str(workspace), "--sandbox", "bwrap", "--output-dir",
            str(root / "out"), "--state-dir", str(root / "state"), "--run-id", name, *extra]
    started = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True)
    elapsed = time.perf_counter() - started
    shutil.rmtree(root / "out" / name, ignore_errors=True)
    shutil.rmtree(root / "state" / name, ignore_errors=True)
    return elapsed


def file_system(root: Path, sample: Path) -> str:
    """The file system's type (``findmnt``; ``stat -f`` names ext4 "ext2/ext3") and whether it clones files."""
    found = subprocess.run(["findmnt", "-n", "-o", "FSTYPE", "--target", str(root)], capture_output=True, text=True)
    kind = found.stdout.strip() or subprocess.run(["stat", "-f", "-c", "%T", str(root)], capture_output=True,
                                                  text=True).stdout.strip()
    clone = root / "reflink-probe"
    reflinks = subprocess.run(["cp", "--reflink=always", str(sample), str(clone)], capture_output=True).returncode == 0
    clone.unlink(missing_ok=True)
    return f"{kind} ({'with' if reflinks else 'without'} reflinks)"


def snapshot_vs_cp(root: Path, megabytes: int) -> tuple[float, float, str]:
    from forkpoint.branches.branching import take_snapshot

    tree = c.fresh_dir(root / "big")
    for index in range(megabytes):
        (tree / f"f{index:04d}.bin").write_bytes(os.urandom(1024 * 1024))
    fs = file_system(root, tree / "f0000.bin")
    cp_times, snap_times = [], []
    for round_index in range(3):
        target = c.fresh_dir(root / f"cp-{round_index}")
        started = time.perf_counter()
        subprocess.run(["cp", "-a", f"{tree}/.", str(target)], check=True)
        cp_times.append(time.perf_counter() - started)
        shutil.rmtree(target)
        state = c.fresh_dir(root / f"state-snap-{round_index}")
        started = time.perf_counter()
        take_snapshot(tree, state, root, "benchmark")
        snap_times.append(time.perf_counter() - started)
        shutil.rmtree(state)
    return c.median(snap_times), c.median(cp_times), fs


def main() -> None:
    args = c.finish_args(c.parser(__doc__ or "", repeat=3).parse_args())
    counts = (1, 2) if args.smoke else (1, 4, 8)
    megabytes = 5 if args.smoke else 200
    os.environ.setdefault("ANTHROPIC_API_KEY", "unused-by-the-stub")
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-branch-") as tmp:
        root = Path(tmp)
        write_session(root / "session.jsonl")
        tasks = {"replay-only": lambda: replay(root, "ro", "--replay-only", "--drop-snapshot"),
                 "replay + 1 continuation": lambda: replay(root, "one", "--upstream", "stub")}
        for k in counts:
            tasks[f"--branches {k}"] = (lambda k=k: replay(root, f"b{k}", "--upstream", "stub", "--branches", str(k)))
        samples = c.interleaved(tasks, args.repeat, args.seed)
        snap, cp, fs = snapshot_vs_cp(root, megabytes)
    replay_only = c.median(samples["replay-only"])
    continuation = max(c.median(samples["replay + 1 continuation"]) - replay_only, 0.0)
    rows = [("replay-only", "", f"{replay_only:.2f} s", "", ""),
            ("replay + 1 continuation", "", f"{replay_only + continuation:.2f} s", "", "")]
    verdicts = []
    for k in counts:
        branched = c.median(samples[f"--branches {k}"])
        separate = k * (replay_only + continuation)
        budget = (replay_only + k * continuation) * GOAL_OVERHEAD
        verdicts.append(branched <= budget)
        rows.append((f"--branches {k}", f"{separate:.2f} s", f"{branched:.2f} s", f"{branched / separate:.2f}×",
                     c.verdict(branched <= budget)))
    body = c.table(("run", "K separate full replays (est.)", "measured", "vs separate", "≤ replay + K cont. + 10%"),
                   rows)
    body += (f"\n\nOne continuation ≈ {continuation:.2f} s (full − replay-only, same run). Snapshot of a "
             f"{megabytes} MB workspace on {fs}: {snap:.2f} s vs `cp -a` {cp:.2f} s = {snap / cp:.2f}× → "
             f"{c.verdict(snap <= GOAL_SNAPSHOT * cp)} (goal ≤ {GOAL_SNAPSHOT}×; the snapshot hashes each file "
             f"while copying it, for its inventory). Branches run concurrently under bwrap (--parallel = cores).")
    c.emit("branching", "12. Branching (K continuations of one replay; snapshot cost)", body, args)


if __name__ == "__main__":
    main()
