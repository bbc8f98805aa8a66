"""Every benchmark script still runs: its --smoke mode exits 0 and prints its table, and never rewrites the docs.

The real runs are on demand (`python benchmarks/<name>.py`, results in docs/benchmarks.md); this keeps them
from rotting. The continuation smoke starts one real agent per adapter (about a minute on a busy 2-core machine);
the rest stays under a minute together.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
BENCHMARKS = ROOT / "benchmarks"
DOC = ROOT / "docs" / "benchmarks.md"
#: script -> time bound of its smoke run (seconds), generous for a busy 2-core machine
SCRIPTS = {
    "prefix_fidelity": 20,
    "prepare_throughput": 15,
    "scaling": 20,
    "cli_startup": 20,
    "tool_overhead": 60,
    "bridge_overhead": 25,
    "token_capture": 30,
    "observation_fidelity": 30,
    "continuation_fidelity": 180,
    "export": 60,
    "export_groups": 60,
    "report_open": 60,
    "batch_throughput": 150,
    "branching": 120,
    "real_world": 60,
    "scoring": 60,
    "rl_batch": 90,
    "versions": 60,
}


def test_the_fixture_benchmarks_know_every_agent() -> None:
    """A new adapter must be added to the fidelity benchmarks' table (benchmarks/_fixtures.py), not left out."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        from _fixtures import SPECS  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(BENCHMARKS))
    from forkpoint.adapters import AGENT_NAMES

    assert set(SPECS) == set(AGENT_NAMES)


def test_every_script_has_a_smoke_test() -> None:
    scripts = {path.stem for path in BENCHMARKS.glob("*.py") if not path.name.startswith("_")}
    assert scripts == set(SCRIPTS)


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_smoke(name: str) -> None:
    before = DOC.read_bytes() if DOC.exists() else None
    started = time.monotonic()
    done = subprocess.run([sys.executable, str(BENCHMARKS / f"{name}.py"), "--smoke"], cwd=ROOT,
                          capture_output=True, text=True, timeout=SCRIPTS[name], check=False)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert any(line.startswith("## ") for line in lines), done.stdout
    header = [index for index, line in enumerate(lines) if line.startswith("| ")]
    assert header and lines[header[0] + 1].startswith("|---"), done.stdout  # a Markdown table was printed
    assert "written to" not in done.stdout
    assert (DOC.read_bytes() if DOC.exists() else None) == before, "--smoke must not rewrite docs/benchmarks.md"
    assert elapsed < SCRIPTS[name]
