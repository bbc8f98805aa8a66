"""OpenHands V0's calibration probe, the parts that need no OpenHands (the real calibration:
tests/e2e/test_calibrate_openhands.py): the recording is read as the candidate by its system event alone."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.adapters import agent_spec, get_adapter
from forkpoint.adapters.calibration import Outcome
from forkpoint.adapters.openhands.calibrate import ERRORS, HAS_V0, NO_V0, V0_MODULE, as_candidate, has_v0, probe

FIXTURE = Path(__file__).parents[2] / "fixtures" / "openhands" / "0.62.0" / "parallel" / "trajectory.json"


def test_only_the_system_events_version_is_rewritten_and_the_parser_reads_it(tmp_path: Path) -> None:
    original = json.loads(FIXTURE.read_text())
    rewritten = as_candidate(FIXTURE.read_bytes(), "0.61.0")
    events = json.loads(rewritten)
    assert [e for e in events if e.get("action") != "system"] == [e for e in original if e.get("action") != "system"]
    assert next(e for e in events if e.get("action") == "system")["args"]["openhands_version"] == "0.61.0"
    source = tmp_path / "trajectory.json"
    source.write_bytes(rewritten)
    assert get_adapter("openhands").parse(source).version == "0.61.0"


def test_v0_records_no_error_flag_so_the_probe_expects_none() -> None:
    """V0 observations carry no error flag (a refused replacement is ``ERROR:`` text): every call of the verified
    release's own recording parses as not an error, and so must the probe's."""
    parsed = get_adapter("openhands").parse(FIXTURE)
    assert all(call.historical is not None and not call.historical.is_error
               for batch in parsed.batches for call in batch.calls)
    assert not any(flag for turn in ERRORS for flag in turn)


def test_a_release_without_v0s_agent_loop_fails_naming_it_before_anything_runs(tmp_path: Path) -> None:
    """openhands-ai 1.11.0 no longer ships ``openhands.core`` (V0 was removed): before, the probe ran the runner,
    which died with ``ModuleNotFoundError`` (a crash the sweep could not tell from a forkpoint bug); now the
    ``release`` check names it and nothing is run. A Python with no OpenHands at all stands for such a release."""
    outcome = Outcome("openhands", "1.11.0")
    assert probe(agent_spec("openhands"), Path(sys.executable), "1.11.0", ["0.62.0"], tmp_path, outcome) is None
    assert outcome.reason == NO_V0
    assert [(c.check, c.ok) for c in outcome.checks] == [("release", False)]
    assert outcome.checks[0].detail.startswith("openhands-ai 1.11.0 has no `openhands.core.main`")
    assert not (tmp_path / "request.json").exists()  # the runner never ran


def test_the_verified_release_has_v0s_agent_loop(tmp_path: Path) -> None:
    runtime = runtimes.find("openhands", "0.62.0")
    if runtime is None:
        pytest.skip("openhands 0.62.0 is not installed")
    (tmp_path / "home").mkdir()
    assert has_v0(runtime.entrypoint, tmp_path / "home", tmp_path)


def test_a_v0_package_whose_dependency_does_not_import_is_not_called_v0_less(tmp_path: Path) -> None:
    """Only V0's own packages missing mean "no V0": a release whose ``openhands.core`` fails on a dependency
    (openhands-ai 1.3.0 with today's ``mcp``) is left to the runner, whose error says which."""
    (tmp_path / "openhands" / "core").mkdir(parents=True)
    (tmp_path / "openhands" / "__init__.py").write_text("")
    (tmp_path / "openhands" / "core" / "__init__.py").write_text("import forkpoint_no_such_dependency\n")

    def check() -> int:
        return subprocess.run([sys.executable, "-c", HAS_V0, V0_MODULE], cwd=tmp_path, capture_output=True,
                              timeout=60, check=False).returncode

    assert check() != 4  # the dependency's ModuleNotFoundError: not "no V0" (the runner runs and says)
    (tmp_path / "openhands" / "core" / "__init__.py").write_text("")
    assert check() == 4  # openhands.core without main: no V0
    (tmp_path / "openhands" / "core" / "main.py").write_text("")
    assert check() == 0
