"""Pi's own tools, re-run by forkpoint's Node runner, give the recorded observations on every fixture.

Needs the real runtime (`forkpoint agents install pi@0.83.0`); the workspace is restored to the recording's
initial state at the recorded path, and every call of every batch runs in order.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from forkpoint.adapters.pi import PiAdapter
from forkpoint.adapters.pi.parse import parse_pi
from forkpoint.errors import ErrorKind, ReplayError
from forkpoint.model import CallPolicy, RunContext, ToolCall
from forkpoint.runtimes import find
from forkpoint.testing.recordings import restore_initial

FIXTURES = Path(__file__).parents[2] / "fixtures" / "pi" / "0.83.0"
SCENARIOS = ("single_bash", "parallel", "file_tools", "error_result")

pytestmark = pytest.mark.skipif(find("pi", "0.83.0") is None, reason="pi 0.83.0 is not installed")


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_fresh_equals_historical(scenario: str, tmp_path: Path) -> None:
    parsed = parse_pi(FIXTURES / scenario / "events.jsonl")
    context = RunContext(restore_initial(FIXTURES / scenario), tmp_path / "state", tmp_path / "out")
    executor = PiAdapter().executor(None, context)  # type: ignore[arg-type]
    try:
        for batch in parsed.batches:
            for call in batch.calls:
                fresh = executor.run(call)
                assert call.historical is not None
                assert (fresh.content, fresh.is_error) == (call.historical.content, call.historical.is_error), call
                recorded_details = call.native.get("details") if isinstance(call.native, dict) else None
                assert fresh.native["details"] == recorded_details, call.call_id
    finally:
        executor.close()


def test_unknown_tool_is_refused_before_any_effect(tmp_path: Path) -> None:
    context = RunContext(restore_initial(FIXTURES / "unknown_tool"), tmp_path / "state", tmp_path / "out")
    executor = PiAdapter().executor(None, context)  # type: ignore[arg-type]
    call = ToolCall("c1", "glob", {"pattern": "*.py"}, None, CallPolicy.REFUSED, "unsupported")
    with pytest.raises(ReplayError) as info:
        executor.run(call)
    assert info.value.kind is ErrorKind.UNSUPPORTED_VERSION and info.value.before_effect
