"""4. CLI cold start: ``forkpoint --help``, ``--version`` and a prepare-only of a small file vs ``python -c pass``.

Measured as a user installs forkpoint (as ``uv tool install`` / ``pipx`` install it): a fresh ``python3 -m venv``
in the temporary directory with this checkout ``pip install``-ed into it (not editable; pip compiles the bytecode
at install time), so the interpreter's site imports nothing of a development environment (no editable-install
hooks, no ``.pth`` files that import argparse/pathlib/typing). The baseline ``python -c pass`` runs the venv's own
interpreter; every command gets an environment without ``PYTHON*`` variables (a ``PYTHONPATH`` would load another
copy of forkpoint). The console script pip (and pipx) writes imports ``re`` before forkpoint (~5 ms: alone it is
1.5x ``python -c pass``); ``uv tool install`` writes one that does not. The venv gets a copy of uv's script too
(``forkpoint-uv``, uv's template, same entry point), measured in rows of their own. ``--no-venv`` (implied by
``--smoke``) measures the interpreter running this script instead, with a private bytecode cache
(``PYTHONPYCACHEPREFIX``, filled by the warm-up round).

Every round runs each command once in a freshly shuffled order (after one warm-up round). The import breakdown
comes from ``python -X importtime``: the slowest imports with the chain that pulled each of them in.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from forkpoint.testing.claude_sessions import simple_session

TARGETS = {"forkpoint --help": 1.5, "forkpoint --version": 1.5, "forkpoint replay --prepare-only": 3.0,
           "forkpoint --help (uv's script)": 1.5, "forkpoint --version (uv's script)": 1.5}
#: the console script `uv tool install` / `uv pip install` writes for forkpoint's entry point (no `import re`)
UV_SCRIPT = """# -*- coding: utf-8 -*-
import sys
from forkpoint.cli import main
if __name__ == "__main__":
    if sys.argv[0].endswith("-script.pyw"):
        sys.argv[0] = sys.argv[0][:-11]
    elif sys.argv[0].endswith(".exe"):
        sys.argv[0] = sys.argv[0][:-4]
    sys.exit(main())
"""
#: the standard-library modules a prepare-only cannot do without (options, paths, JSON, hashes, type hints)
STDLIB_FLOOR = "import argparse, hashlib, json, pathlib, typing"
_IMPORT_LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)")


@dataclass(frozen=True)
class Interpreter:
    """The Python that runs the commands, forkpoint's console script beside it, and their environment."""

    python: str
    forkpoint: list[str]
    env: dict[str, str]
    described: str
    uv_forkpoint: list[str] | None = None  # uv's console script, in a venv


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without ``PYTHON*`` variables (no PYTHONPATH to another copy of forkpoint)."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTHON")}
    return {**env, **extra}


def clean_venv(root: Path) -> Interpreter:
    """A fresh venv with this checkout installed (non-editable), built from a copy so the checkout stays clean."""
    source = root / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(c.ROOT / name, source / name)
    shutil.copytree(c.ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, env=clean_env())
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    str(source)], check=True, env=clean_env(), capture_output=True)
    uv_script = venv / "bin" / "forkpoint-uv"
    uv_script.write_text(f"#!{venv / 'bin' / 'python'}\n{UV_SCRIPT}")
    uv_script.chmod(0o755)
    return Interpreter(str(venv / "bin" / "python"), [str(venv / "bin" / "forkpoint")], clean_env(),
                       "a fresh `python3 -m venv` with this checkout `pip install`-ed (non-editable), "
                       f"{sys.version.split()[0]}; the baseline is that venv's `python -c pass`; `forkpoint` is "
                       "pip's console script, `forkpoint-uv` uv's", [str(uv_script)])


def this_interpreter(root: Path) -> Interpreter:
    return Interpreter(sys.executable, c.forkpoint_argv(), clean_env(PYTHONPYCACHEPREFIX=str(root / "pycache"),
                                                                     PYTHONPATH=os.environ.get("PYTHONPATH", "")),
                       f"this interpreter (`{sys.executable}`, --no-venv) with a private bytecode cache")


def import_tree(stderr: str) -> list[tuple[int, list[str]]]:
    """(cumulative µs, chain from the top-level import down to the module) of every import ``-X importtime``
    reported: a module's line comes after its own imports' lines, one indentation step deeper."""
    pending: dict[int, list[tuple[int, list[str]]]] = {}
    found: list[tuple[int, list[str]]] = []
    for line in stderr.splitlines():
        match = _IMPORT_LINE.match(line)
        if not match:
            continue
        depth, name, cumulative = (len(match.group(3)) - 1) // 2, match.group(4), int(match.group(2))
        children = pending.pop(depth + 1, [])
        node = (cumulative, [name])
        found.append(node)
        for _, chain in children:  # every descendant's chain gains this module at its front
            chain.insert(0, name)
        pending.setdefault(depth, []).extend([node, *children])
    return found


def heaviest_imports(stderr: str, count: int = 12) -> list[str]:
    """The slowest imports (at least 2 ms), each with the chain that imported it."""
    nodes = sorted(import_tree(stderr), key=lambda node: -node[0])
    shown: list[str] = []
    for cumulative, chain in nodes:
        if len(shown) == count or cumulative < 2000:
            break
        shown.append(f"{cumulative / 1000:.1f} ms `{chain[-1]}` ← " + " ← ".join(f"`{name}`" for name in
                                                                                 reversed(chain[:-1]))
                     if len(chain) > 1 else f"{cumulative / 1000:.1f} ms `{chain[-1]}` (top level)")
    return shown


def main() -> None:
    options = c.parser(__doc__ or "", repeat=30)
    options.add_argument("--no-venv", action="store_true",
                         help="measure this interpreter instead of a fresh venv (implied by --smoke)")
    args = c.finish_args(options.parse_args())
    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-startup-") as tmp:
        root = Path(tmp)
        python = this_interpreter(root) if args.no_venv or args.smoke else clean_venv(root)
        session = simple_session(2).write(root / "session.jsonl")
        (root / "ws").mkdir()
        runs = itertools.count()

        def replay(run_id: str) -> list[str]:
            return ["replay", "--agent", "claude-code", "--trajectory", str(session), "--after-step", "1",
                    "--prepare-only", "--workspace", "ws", "--run-id", run_id, "--output-dir", "out",
                    "--state-dir", "state"]

        def command(argv: list[str]) -> float:
            return c.timed_run(argv, cwd=root, env=python.env)[0]

        tasks = {
            "python -c pass": lambda: command([python.python, "-c", "pass"]),
            "forkpoint --version": lambda: command([*python.forkpoint, "--version"]),
            "forkpoint --help": lambda: command([*python.forkpoint, "--help"]),
            "forkpoint replay --prepare-only": lambda: command([*python.forkpoint, *replay(f"r{next(runs)}")]),
            "python -c 'import forkpoint.cli' (reference)": lambda: command([python.python, "-c",
                                                                             "import forkpoint.cli"]),
            "python -c 'import re' (pip's script imports it)": lambda: command([python.python, "-c", "import re"]),
            # the floor under prepare-only: what any Python CLI that parses options, paths, JSON and hashes loads
            # before doing anything, and the fast JSON library the journal and hashes use (reference rows)
            f"python -c '{STDLIB_FLOOR}' (floor)": lambda: command([python.python, "-c", STDLIB_FLOOR]),
            "python -c 'import orjson' (reference)": lambda: command([python.python, "-c", "import orjson"]),
        }
        if python.uv_forkpoint is not None:
            uv = python.uv_forkpoint
            tasks["forkpoint --help (uv's script)"] = lambda: command([*uv, "--help"])
            tasks["forkpoint --version (uv's script)"] = lambda: command([*uv, "--version"])
        samples = c.interleaved(tasks, args.repeat, args.seed)
        breakdown = {}
        for name, argv in (("forkpoint --help", ["--help"]), ("forkpoint replay --prepare-only", replay("imports"))):
            done = c.timed_run([python.python, "-X", "importtime", "-m", "forkpoint.cli", *argv], cwd=root,
                               env=python.env)[1]
            breakdown[name] = heaviest_imports(done.stderr.decode())
    base = c.median(samples["python -c pass"])
    rows = []
    for name, values in samples.items():
        target = TARGETS.get(name)
        verdict = f"{c.verdict(c.median(values) <= target * base)} (≤ {target}×)" if target else ""
        rows.append([name, c.ms(c.median(values)), c.ms(c.p95(values)), c.ratio(c.median(values), base), verdict])
    body = c.table(["command", "median ms", "p95 ms", "/ python -c pass", "target"], rows)
    body += f"""

{args.repeat} rounds, each command once per round in a shuffled order, one warm-up round; the interpreter:
{python.described}.

Slowest imports (`python -X importtime -m forkpoint.cli ...`, one run; cumulative time, then the chain that
imported the module, nearest importer first):
"""
    for name, lines in breakdown.items():
        body += f"\n- {name}:\n" + "\n".join(f"  - {line}" for line in lines)
    if args.no_venv:  # the development interpreter is the second baseline, in a section of its own
        c.emit("cli_startup_dev", "4b. CLI cold start, development interpreter", body, args,
               command=f"python benchmarks/cli_startup.py --no-venv --repeat {args.repeat}")
    else:
        c.emit("cli_startup", "4. CLI cold start", body, args)


if __name__ == "__main__":
    main()
