"""End to end: ``forkpoint agents calibrate`` on REAL unshipped OpenHands releases (issue 28, item 4): the V1 SDK
(openhands-sdk + openhands-tools) and V0 (openhands-ai), both Python agents whose start-up is slow, so each
release is calibrated ONCE per module into a private calibration store and every test reads that outcome.

ScriptedModel is the model (the only stand-in); each release is installed into the runtime cache by forkpoint's
own installer (uv, on the Python of its line). SDK 1.58.1 calibrates as 1.58.2; SDK 1.5.0 FAILS, the report naming
why (its tools' texts differ); V0 0.61.0 calibrates as 0.62.0, and a recording of it then reads as
``calibrated``. SWE-agent cannot be calibrated (tests/adapters/test_calibrate.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.adapters.calibrate import calibrate
from forkpoint.adapters.calibration import Outcome
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request

#: Each release costs 1–2 minutes of OpenHands start-up and a ~0.5 GB install: outside CI's time budget, so this
#: module runs on request (FORKPOINT_SLOW_CALIBRATIONS=1); the same releases are measured by
#: ``benchmarks/versions.py --calibrate`` (docs/agents.md). The unit tests of both probes run in CI.
pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(os.environ.get("FORKPOINT_SLOW_CALIBRATIONS") != "1",
                                 reason="slow calibrations of Python agents: FORKPOINT_SLOW_CALIBRATIONS=1")]

SDK_RELEASE = "1.58.1"  # the release before the verified 1.58.2
SDK_OLD = "1.5.0"  # December 2025: no api_mode on its LLM, and its file editor's texts differ
V0_RELEASE = "0.61.0"  # the release before the verified 0.62.0


def _needs(agent: str, *versions: str) -> None:
    own_uv = runtimes.cache_root() / ".tools" / "uv" / "bin" / "uv"  # forkpoint's own uv (runtimes.python)
    if runtimes.find(agent, max(versions)) is None:
        pytest.skip(f"{agent} {max(versions)} (the verified version) is not installed")
    if any(runtimes.find(agent, v) is None for v in versions) and shutil.which("uv") is None \
            and not own_uv.is_file():
        pytest.skip(f"{agent} {', '.join(versions)} are not installed and uv is missing")


@pytest.fixture(scope="module")  # its env change ends with this module
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    previous = os.environ.get("FORKPOINT_CALIBRATIONS")
    folder = tmp_path_factory.mktemp("calibrations")
    os.environ["FORKPOINT_CALIBRATIONS"] = str(folder)
    try:
        yield folder
    finally:
        if previous is None:
            os.environ.pop("FORKPOINT_CALIBRATIONS", None)
        else:
            os.environ["FORKPOINT_CALIBRATIONS"] = previous


@pytest.fixture(scope="module")
def sdk(store: Path) -> Outcome:
    _needs("openhands-sdk", SDK_RELEASE, "1.58.2")
    return calibrate(f"openhands-sdk@{SDK_RELEASE}")


@pytest.fixture(scope="module")
def v0(store: Path) -> Outcome:
    _needs("openhands", V0_RELEASE, "0.62.0")
    return calibrate(f"openhands@{V0_RELEASE}")


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "forkpoint.cli", *args], capture_output=True, text=True,
                          timeout=600, check=False)


def _checks(outcome: Outcome) -> dict[tuple[str, str | None], tuple[bool, str]]:
    return {(c.check, c.against): (c.ok, c.detail) for c in outcome.checks}


def test_an_sdk_release_is_calibrated_with_every_tool_and_listed(sdk: Outcome, store: Path) -> None:
    """1.58.1's persisted conversation (no SDK version in it) reads with every call; its terminal (parallel with
    the editor, a 39,000-character output cut by the SDK, a missing file), file editor (a refused replacement),
    task tracker, think and an unknown tool re-run exactly with 1.58.2's tools; the 1.58.1 SDK resuming the
    conversation rebuilt with 1.58.2's profile passes that profile's gate."""
    assert (sdk.ok, sdk.maps_to, sdk.family) == (True, "1.58.2", "openhands-sdk/v1-event-log"), sdk.report()
    checks = _checks(sdk)
    assert checks[("tool_observations", "1.58.2")] == (True, "10 of 10 observations exact")
    assert checks[("resume_envelope", "1.58.2")][0]
    assert "version (not recorded), 10 calls" in checks[("parse", None)][1]
    profile = json.loads((store / "openhands-sdk" / f"{SDK_RELEASE}.json").read_text())
    assert (profile["status"], profile["maps_to"]) == ("calibrated", "1.58.2")
    bundle = json.loads((store / "openhands-sdk" / f"{SDK_RELEASE}.probe" / "conversation.json").read_text())
    names = {e.get("tool_name") for e in bundle["events"] if e.get("kind") == "ActionEvent"}
    assert names == {"terminal", "file_editor", "task_tracker", "think", "no_such_tool", "finish"}
    # the SDK of the release wrote it: its openhands-tools is the release's too (installed in lockstep)
    runtime = runtimes.find("openhands-sdk", SDK_RELEASE)
    assert runtime is not None
    tools = subprocess.run([str(runtime.entrypoint), "-I", "-c", "import importlib.metadata as m; "
                            "print(m.version('openhands-tools'))"], capture_output=True, text=True, timeout=120,
                           check=False)
    assert tools.stdout.strip() == SDK_RELEASE, tools.stderr
    assert f"  {SDK_RELEASE}: calibrated (as 1.58.2)" in _cli("agents", "list").stdout.splitlines()


def test_an_older_sdk_release_fails_with_its_tool_differences_named(sdk: Outcome, store: Path) -> None:
    """1.5.0's ``LLM`` has no ``api_mode`` (forkpoint's runner pins Chat Completions with it where it exists): the
    release picks Chat Completions for the scripted model itself, so the probe runs (before: ``ValidationError``,
    nothing recorded). It records and parses, and the report names what differs: its file editor numbers the
    empty line after a file's last newline (``view`` of ``notes.txt`` ends ``     3\t``), 1.58.2's does not. No
    profile is written and the 1.58.1 profile is untouched."""
    _needs("openhands-sdk", "1.58.2")
    before = (store / "openhands-sdk" / f"{SDK_RELEASE}.json").read_bytes()
    failed = calibrate(f"openhands-sdk@{SDK_OLD}")
    assert (failed.ok, failed.reason) == (
        False, "no verified version's tool semantics and resume envelope both match (tried 1.58.2)"), failed.report()
    checks = _checks(failed)
    assert checks[("record", None)][0] and checks[("parse", None)][0]
    ok, detail = checks[("tool_observations", "1.58.2")]
    assert not ok and "observations exact; differ: file_editor" in detail
    assert "2\\tsecond line\\n     3\\t\\n'" in detail, detail  # the detail shows the texts' reprs
    assert not (store / "openhands-sdk" / f"{SDK_OLD}.json").exists()
    assert json.loads((store / "openhands-sdk" / f"{SDK_OLD}.failed.json").read_text())["status"] == "failed"
    assert (store / "openhands-sdk" / f"{SDK_RELEASE}.json").read_bytes() == before


def test_a_v0_release_is_calibrated_and_its_recordings_read_as_calibrated(
        v0: Outcome, store: Path, tmp_path: Path) -> None:
    """0.61.0's saved trajectory names 0.61.0 and reads with every call; parallel execute_bash +
    str_replace_editor, a 39,000-character output (cut by OpenHands), a missing file, a refused replacement and
    think re-run exactly with 0.62.0's OpenHands; the 0.61.0 runner continuing the rebuilt prefix passes 0.62.0's
    gate. A recording of 0.61.0 then prepares as ``calibrated`` (tools as 0.62.0, quality not degraded)."""
    assert (v0.ok, v0.maps_to, v0.family) == (True, "0.62.0", "openhands/v0-events-json"), v0.report()
    checks = _checks(v0)
    assert checks[("tool_observations", "0.62.0")] == (True, "8 of 8 observations exact")
    assert checks[("resume_envelope", "0.62.0")][0]
    assert "version 0.61.0, 8 calls" in checks[("parse", None)][1]
    recording = store / "openhands" / f"{V0_RELEASE}.probe" / "trajectory.json"
    assert f'"openhands_version": "{V0_RELEASE}"' in recording.read_text()
    prepared = execute(build_request({
        "agent": "openhands", "trajectory": str(recording), "after_step": 2, "state_dir": str(tmp_path / "state"),
        "output_dir": str(tmp_path / "out"), "run_id": "prepare", "prepare_only": True}, source="test"))
    assert prepared.failure is None, prepared.failure
    assert (prepared.recorded_version, prepared.recorded_version_status) == (V0_RELEASE, "calibrated")
    assert prepared.quality_reasons == [] and prepared.agent is not None
    assert prepared.agent.tool_semantics_version == "0.62.0"
    rows = json.loads(_cli("agents", "list", "--json").stdout)
    row = next(r for r in rows if (r["agent"], r["version"]) == ("openhands", V0_RELEASE))
    assert (row["status"], row["detail"]) == ("calibrated", "as 0.62.0")
