"""4. CLI cold start: ``forkpoint --help`` and a prepare-only of a small file vs ``python -c pass`` (target ≤ 3×).

Every round runs each command once in a freshly shuffled order (after one warm-up round); the interpreter is
the one running this script, and ``forkpoint`` is its installed console script. The import breakdown comes from
``python -X importtime -m forkpoint.cli --help``.

Bytecode: an installed package starts from its cached bytecode (pip compiles it at install time; an editable
install writes ``__pycache__`` on first use). So every command, the baseline included, runs with a private
bytecode cache (``PYTHONPYCACHEPREFIX`` in the temporary directory, filled by the warm-up round) even when the
caller's environment sets ``PYTHONDONTWRITEBYTECODE``; one reference row repeats the prepare-only command with
``PYTHONDONTWRITEBYTECODE=1`` and no cache of forkpoint's own modules (compiled from source at every start).
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from forkpoint.testing.claude_sessions import simple_session

TARGET = 3.0


def bytecode_env(cache: Path | None) -> dict[str, str]:
    """The caller's environment with a private bytecode cache (``None``: bytecode neither written nor cached)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    if cache is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def import_breakdown(argv: list[str], cwd: Path, env: dict[str, str], count: int = 6) -> str:
    """The slowest top-level imports of a forkpoint command (cumulative, self-reported by -X importtime)."""
    _, done = c.timed_run([sys.executable, "-X", "importtime", "-m", "forkpoint.cli", *argv], cwd=cwd, env=env)
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
        cached, uncached = bytecode_env(root / "pycache"), bytecode_env(None)

        def command(argv: list[str], env: dict[str, str] = cached) -> float:
            return c.timed_run(argv, cwd=root, env=env)[0]

        def prepare(env: dict[str, str] = cached) -> float:
            return command([*fp, "replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "1",
                            "--prepare-only", "--workspace", "ws", "--run-id", f"r{next(runs)}", "--output-dir", "out",
                            "--state-dir", "state"], env)

        tasks = {
            "python -c pass": lambda: command([sys.executable, "-c", "pass"]),
            "forkpoint --version": lambda: command([*fp, "--version"]),
            "forkpoint --help": lambda: command([*fp, "--help"]),
            "forkpoint replay --prepare-only (2-batch session)": prepare,
            "forkpoint replay --prepare-only, no bytecode cache (reference)": lambda: prepare(uncached),
            "python -c 'import forkpoint.cli' (reference)": lambda: command([sys.executable, "-c",
                                                                             "import forkpoint.cli"]),
        }
        samples = c.interleaved(tasks, args.repeat, args.seed)
        replay = ["replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "1",
                  "--prepare-only", "--workspace", "ws", "--output-dir", "out", "--state-dir", "state", "--run-id"]
        breakdown = {
            "forkpoint --help": import_breakdown(["--help"], root, cached),
            "forkpoint replay --prepare-only": import_breakdown([*replay, "importtime"], root, cached),
            "forkpoint replay --prepare-only, no bytecode cache": import_breakdown([*replay, "importtime-nocache"],
                                                                                   root, uncached),
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
Every command, the baseline included, starts from cached bytecode as an installed package does (a private
`PYTHONPYCACHEPREFIX`, filled by the warm-up round), except the "no bytecode cache" reference row:
`PYTHONDONTWRITEBYTECODE=1`, so forkpoint's own modules are compiled from source at every start.

Slowest imports (`python -X importtime`, cumulative time of each top-level import, one run):
""" + "\n".join(f"- {name}: {row}" for name, row in breakdown.items())
    c.emit("cli_startup", "4. CLI cold start", body, args)


if __name__ == "__main__":
    main()
