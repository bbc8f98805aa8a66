"""4. CLI cold start: ``forkpoint --help`` and a prepare-only of a small file vs ``python -c pass`` (target ≤ 3×).

Every round runs each command once in a freshly shuffled order (after one warm-up round); the interpreter is
the one running this script, and ``forkpoint`` is its installed console script. The import breakdown comes from
``python -X importtime -m forkpoint.cli --help``.
"""

from __future__ import annotations

import itertools
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from forkpoint.testing.claude_sessions import simple_session

TARGET = 3.0


def import_breakdown(argv: list[str], cwd: Path, count: int = 6) -> str:
    """The slowest top-level imports of a forkpoint command (cumulative, self-reported by -X importtime)."""
    _, done = c.timed_run([sys.executable, "-X", "importtime", "-m", "forkpoint.cli", *argv], cwd=cwd)
    rows: list[tuple[int, str]] = []
    for line in done.stderr.decode().splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match and len(match.group(3)) <= 2:  # the top-level package of each import chain
            rows.append((int(match.group(2)), match.group(4)))
    rows.sort(reverse=True)
    return ", ".join(f"`{name}` {micros / 1000:.1f} ms" for micros, name in rows[:count])


def main() -> None:
    args = c.finish_args(c.parser(__doc__ or "", repeat=30).parse_args())
    fp = c.forkpoint_argv()
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-startup-") as tmp:
        root = Path(tmp)
        session = simple_session(2).write(root / "session.jsonl")
        (root / "ws").mkdir()
        runs = itertools.count()

        def command(argv: list[str]) -> float:
            return c.timed_run(argv, cwd=root)[0]

        tasks = {
            "python -c pass": lambda: command([sys.executable, "-c", "pass"]),
            "forkpoint --version": lambda: command([*fp, "--version"]),
            "forkpoint --help": lambda: command([*fp, "--help"]),
            "forkpoint replay --prepare-only (2-batch session)": lambda: command([
                *fp, "replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "1",
                "--prepare-only", "--workspace", "ws", "--run-id", f"r{next(runs)}", "--output-dir", "out",
                "--state-dir", "state"]),
            "python -c 'import forkpoint.cli' (reference)": lambda: command([sys.executable, "-c",
                                                                             "import forkpoint.cli"]),
        }
        samples = c.interleaved(tasks, args.repeat, args.seed)
        breakdown = {
            "forkpoint --help": import_breakdown(["--help"], root),
            "forkpoint replay --prepare-only": import_breakdown(
                ["replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "1",
                 "--prepare-only", "--workspace", "ws", "--run-id", "importtime", "--output-dir", "out",
                 "--state-dir", "state"], root),
        }
    base = c.median(samples["python -c pass"])
    rows = []
    for name, values in samples.items():
        target = c.verdict(c.median(values) <= TARGET * base) if name.startswith("forkpoint") else ""
        rows.append([name, c.ms(c.median(values)), c.ms(c.p95(values)), c.ratio(c.median(values), base), target])
    body = c.table(["command", "median ms", "p95 ms", "/ python -c pass", "≤ 3× target"], rows)
    body += f"""

{args.repeat} rounds, each command once per round in a shuffled order, one warm-up round; `forkpoint` is
`{fp[0]}` (the console script installed next to `{sys.executable}`); the same interpreter runs the baseline.

Slowest imports (`python -X importtime`, cumulative time of each top-level import, one run):
""" + "\n".join(f"- {name}: {row}" for name, row in breakdown.items())
    c.emit("cli_startup", "4. CLI cold start", body, args)


if __name__ == "__main__":
    main()
