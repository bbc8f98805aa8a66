"""The proof: re-running the recorded calls of REAL Codex rollouts reproduces the recorded observations.

For every fixture (tests/fixtures/codex/<version>/<scenario>/, written by the real binaries), the workspace is
rebuilt at the recorded cwd from ``workspace-initial/``, every FRESH-policy call of every complete batch is re-run
in order by ``CodexToolExecutor``, and each fresh observation must equal the historical one call by call, after
``tools.normalize_volatile`` (Chunk ID, wall time, running-session id: values Codex draws at random or measures).

``FORKPOINT_CODEX_EXTRA_FIXTURES`` (a ``:``-separated list of folders with the same ``<version>/<scenario>/``
layout, e.g. probes recorded with the real binaries) adds more recordings to the same check.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from forkpoint.adapters.codex.parse import parse_rollout
from forkpoint.adapters.codex.tools import PROFILES, CodexToolExecutor, normalize_volatile
from forkpoint.adapters.versions import nearest
from forkpoint.core.errors import ReplayError
from forkpoint.core.model import CallPolicy, FreshObservation, RunContext, ToolCall
from forkpoint.testing.recordings import holding, restore_initial

FIXTURES = Path(__file__).parents[2] / "fixtures" / "codex"
EXTRA = [Path(p) for p in os.environ.get("FORKPOINT_CODEX_EXTRA_FIXTURES", "").split(":") if p]
ROLLOUTS = sorted(p for root in [FIXTURES, *EXTRA] for p in root.glob("0.*/*/rollout.jsonl"))


def _fresh_calls(rollout: Path) -> list[ToolCall]:
    trajectory = parse_rollout(rollout)
    batches = trajectory.batches[: trajectory.complete_count]
    return [call for batch in batches for call in batch.calls if call.policy is CallPolicy.FRESH]


def _case_id(rollout: Path, call_id: str) -> str:
    return f"{rollout.parent.parent.name}-{rollout.parent.name}-{call_id}"


CASES = [(rollout, call.call_id) for rollout in ROLLOUTS for call in _fresh_calls(rollout)]
IDS = [_case_id(rollout, call_id) for rollout, call_id in CASES]


@dataclass
class Replay:
    calls: dict[str, ToolCall]
    fresh: dict[str, FreshObservation]
    refused: dict[str, ReplayError]


_REPLAYS: dict[Path, Replay] = {}


def replay(rollout: Path) -> Replay:
    """Re-run the rollout's fresh calls once (cached): workspace at the recorded cwd, a temporary agent home."""
    if rollout in _REPLAYS:
        return _REPLAYS[rollout]
    fixture = rollout.parent
    meta = json.loads((fixture / "meta.json").read_text("utf-8"))
    trajectory = parse_rollout(rollout)
    assert trajectory.version is not None
    calls = _fresh_calls(rollout)
    cwd = Path(meta["cwd"])
    assert trajectory.cwd == str(cwd)
    result = Replay({call.call_id: call for call in calls}, {}, {})
    with holding(cwd), tempfile.TemporaryDirectory(prefix="forkpoint-fidelity-") as tmp:
        restore_initial(fixture)
        context = RunContext(cwd, Path(tmp) / "state", Path(tmp) / "out", trajectory.session_id)
        # a release that is not verified is read as its family's nearest verified version (forkpoint.adapters.versions)
        tool_version = trajectory.version if trajectory.version in PROFILES else nearest(list(PROFILES),
                                                                                           trajectory.version)
        executor = CodexToolExecutor(context, tool_version, native=trajectory.native)
        try:
            for call in calls:
                try:
                    result.fresh[call.call_id] = executor.run(call)
                except ReplayError as error:
                    if not error.before_effect:
                        raise
                    result.refused[call.call_id] = error  # reported by that call's test only
        finally:
            executor.close()
            shutil.rmtree(cwd, ignore_errors=True)
    _REPLAYS[rollout] = result
    return result


def test_every_verified_version_has_fresh_calls() -> None:
    versions = {rollout.parent.parent.name for rollout, _ in CASES}
    assert {"0.40.0", "0.149.0", "0.171.0"} <= versions
    for rollout in ROLLOUTS:
        if rollout.is_relative_to(FIXTURES):
            assert _fresh_calls(rollout), f"{rollout.parent} has no fresh call to replay"


#: calls forkpoint refuses on purpose (they stay stale), by scenario and argument: the reason must name why
EXPECTED_REFUSALS = {("view_image", "big.png"): "Codex may resize and re-encode it"}


@pytest.mark.parametrize(("rollout", "call_id"), CASES, ids=IDS)
def test_fresh_observation_equals_recorded(rollout: Path, call_id: str) -> None:
    run = replay(rollout)
    expected = EXPECTED_REFUSALS.get((rollout.parent.name, str(run.calls[call_id].arguments.get("path"))))
    if expected is not None:
        assert call_id in run.refused and expected in str(run.refused[call_id])
        return
    if call_id in run.refused:
        pytest.fail(f"forkpoint refused the call: {run.refused[call_id]}")
    call, fresh = run.calls[call_id], run.fresh[call_id]
    assert call.historical is not None
    assert normalize_volatile(fresh.content) == normalize_volatile(call.historical.content)
    assert fresh.is_error == call.historical.is_error


@pytest.mark.parametrize(("rollout", "call_id"), CASES, ids=IDS)
def test_fresh_output_keeps_codex_header_shape(rollout: Path, call_id: str) -> None:
    """The fresh output is a plausible new Codex output: new random Chunk ID, a measured wall time."""
    run = replay(rollout)
    if call_id in run.refused:
        pytest.skip("refused (see test_fresh_observation_equals_recorded)")
    fresh = run.fresh[call_id].content
    historical = run.calls[call_id].historical
    if run.calls[call_id].name == "view_image":
        assert historical is not None and type(fresh) is type(historical.content)
        return
    assert isinstance(fresh, str)
    assert historical is not None and isinstance(historical.content, str)
    if historical.content.startswith("Chunk ID: "):
        assert fresh.startswith("Chunk ID: ")
        assert normalize_volatile(fresh) != fresh
    if '"duration_seconds":' in historical.content:  # Codex 0.40's shell: the same JSON shape, masked duration
        assert fresh.startswith('{"output":"') and normalize_volatile(fresh) != fresh
        assert run.fresh[call_id].native.get("tool_profile") == "0.40.0"


@pytest.mark.parametrize("rollout", [r for r in ROLLOUTS if r.parent.name == "unified_exec"],
                         ids=lambda r: r.parent.parent.name)
def test_process_session_calls_are_all_rerun(rollout: Path) -> None:
    """Every write_stdin of the real process-session recording re-runs (none reused stale) and matches."""
    writes = [call for batch in parse_rollout(rollout).batches for call in batch.calls if call.name == "write_stdin"]
    assert len(writes) >= 5 and all(call.policy is CallPolicy.FRESH for call in writes)
    run = replay(rollout)
    for call in writes:
        historical = call.historical
        assert historical is not None and call.call_id in run.fresh, call.call_id
        assert normalize_volatile(run.fresh[call.call_id].content) == normalize_volatile(historical.content)
