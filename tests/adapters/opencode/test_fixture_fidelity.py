"""The proof: re-running the recorded calls of REAL OpenCode sessions reproduces the recorded observations.

For every fixture (tests/fixtures/opencode/<version>/<scenario>/, written by the real binaries: the verified ones,
and 1.2.6 for the 1.2 tool profile, tool_profile.LINES), the workspace is
rebuilt at the recorded cwd from ``workspace-initial/``, every FRESH call of every complete batch is re-run in order
by ``OpenCodeToolExecutor`` (the same OpenCode version executing its own tools), and each fresh observation must
equal the historical one call by call (after ``normalize_volatile``), with the same error status and exit code.

CI time: a recording that tests/e2e/test_opencode_continue.py re-runs WHOLE in the default suite (``replayed_whole``:
continued at its last boundary, where it makes the same comparisons, call by call, plus the first request) is
replayed here only with ``FORKPOINT_E2E_EVERY_BOUNDARY=1``: each replay starts OpenCode (~10-20 s on CI), and one
tool host cannot serve two recordings (OpenCode binds its project directory, the recorded cwd, at start).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.e2e.test_opencode_continue import EVERY_BOUNDARY, replayed_whole

from forkpoint import runtimes
from forkpoint.adapters import agent_spec
from forkpoint.adapters.opencode.parse import parse_opencode
from forkpoint.adapters.opencode.tool_profile import line_for
from forkpoint.adapters.opencode.tools import OpenCodeToolExecutor, normalize_volatile
from forkpoint.core.model import CallPolicy, FreshObservation, RunContext, ToolCall
from forkpoint.process import childenv
from forkpoint.testing.recordings import holding, restore_initial

FIXTURES = Path(__file__).parents[2] / "fixtures" / "opencode"
EXPORTS = sorted(FIXTURES.glob("*/*/export.json"))


def fresh_calls(export: Path) -> list[ToolCall]:
    trajectory = parse_opencode(export)
    batches = trajectory.batches[: trajectory.complete_count]
    return [call for batch in batches for call in batch.calls if call.policy is CallPolicy.FRESH]


CASES = [(export, call.call_id) for export in EXPORTS for call in fresh_calls(export)]
#: the recordings the default e2e suite does not re-run whole (see the module's docstring)
LEFT_TO_E2E = set() if EVERY_BOUNDARY else replayed_whole()
REPLAYED = [(e, c) for e, c in CASES if (e.parent.parent.name, e.parent.name) not in LEFT_TO_E2E]
IDS = [f"{e.parent.parent.name}-{e.parent.name}-{c}" for e, c in REPLAYED]


@dataclass
class Replay:
    calls: dict[str, ToolCall]
    fresh: dict[str, FreshObservation]


_REPLAYS: dict[Path, Replay] = {}


@contextmanager
def caller_shell(shell: str) -> Iterator[None]:
    """forkpoint's own SHELL differs from the recording's (unset there: OpenCode ran /usr/bin/bash from PATH)."""
    before = os.environ.get("SHELL")
    os.environ["SHELL"] = shell
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("SHELL", None)
        else:
            os.environ["SHELL"] = before


def replay(export: Path) -> Replay:
    if export in _REPLAYS:
        return _REPLAYS[export]
    version = export.parent.parent.name
    runtime = runtimes.find("opencode", version)
    if runtime is None:
        pytest.skip(f"opencode {version} is not installed (forkpoint agents install opencode@{version})")
    trajectory = parse_opencode(export)
    cwd = Path(json.loads((export.parent / "meta.json").read_text())["cwd"])
    assert trajectory.cwd == str(cwd)
    calls = fresh_calls(export)
    result = Replay({call.call_id: call for call in calls}, {})
    with holding(cwd), tempfile.TemporaryDirectory(prefix="forkpoint-oc-fidelity-") as tmp, caller_shell("/bin/bash"), \
            childenv.passing({}, temp_dir=Path(tmp) / "run-tmp"):  # a run's TMPDIR: Bun's addons go with it
        restore_initial(export.parent)
        line = line_for(version)  # a 1.2 fixture: its own binary, which prints no event for a failed call
        executor = OpenCodeToolExecutor(RunContext(cwd, Path(tmp) / "state", Path(tmp) / "out"), runtime.entrypoint,
                                        shell=trajectory.native.shell, error_events=line is None or line.error_events)
        try:
            for call in calls:
                result.fresh[call.call_id] = executor.run(call)
        finally:
            executor.close()
            shutil.rmtree(cwd, ignore_errors=True)
    _REPLAYS[export] = result
    return result


def test_every_verified_version_has_fresh_calls_of_every_tool() -> None:
    for version in tuple(agent_spec("opencode").versions):
        names = {call.name for export, call_id in CASES if export.parent.parent.name == version
                 for call in fresh_calls(export) if call.call_id == call_id}
        assert names == {"bash", "read", "write", "edit", "glob", "grep", "apply_patch", "skill"}, (version, names)


@pytest.mark.parametrize(("export", "call_id"), REPLAYED, ids=IDS)
def test_fresh_observation_equals_recorded(export: Path, call_id: str) -> None:
    run = replay(export)
    call, fresh = run.calls[call_id], run.fresh[call_id]
    assert call.historical is not None
    assert normalize_volatile(fresh.content) == normalize_volatile(call.historical.content)
    assert fresh.is_error == call.historical.is_error
    recorded = call.native["state"]
    assert fresh.native["status"] == recorded["status"]
    if call.name == "bash":
        assert fresh.return_code == recorded["metadata"]["exit"]
