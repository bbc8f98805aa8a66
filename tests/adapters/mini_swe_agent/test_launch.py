"""Continuation helpers (pure): step limits, the continued file's model config, counting continued turns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint.adapters.mini_swe_agent.launch import continued_actions, restored_model_config, step_limit
from forkpoint.adapters.mini_swe_agent.parse import MiniNative, parse_trajectory
from forkpoint.core.errors import ErrorKind, ReplayError

FIXTURES = Path(__file__).parents[2] / "fixtures" / "mini_swe_agent"


def _native(version: str, scenario: str) -> MiniNative:
    native = parse_trajectory(FIXTURES / version / scenario / "trajectory.traj.json").native
    assert isinstance(native, MiniNative)
    return native


def test_step_limit_counts_the_prefix_calls_or_keeps_the_recorded_limit() -> None:
    native = _native("2.4.6", "format_error")
    assert step_limit(native, 3, 2) == 5
    assert step_limit(native, 3, None) == 20  # the recording's own agent.step_limit
    native.data["info"]["config"]["agent"]["step_limit"] = 0
    assert step_limit(native, 3, None) == 0


def test_restored_model_config_puts_the_recorded_endpoint_back() -> None:
    source = {"info": {"config": {"model": {"model_kwargs": {"api_base": "http://recorded/v1", "drop_params": True}}}}}
    continued = {"info": {"config": {"model": {"model_kwargs": {
        "api_base": "http://127.0.0.1:1/SECRET-TOKEN/v1", "api_key": "forkpoint-bridge",
        "custom_llm_provider": "openai", "drop_params": True}}}}, "messages": []}
    restored = restored_model_config(continued, source)
    assert restored["info"]["config"]["model"]["model_kwargs"] == {"api_base": "http://recorded/v1",
                                                                   "drop_params": True}
    assert "SECRET-TOKEN" not in json.dumps(restored)
    assert restored_model_config({"messages": []}, source) == {"messages": []}  # nothing to restore


def test_continued_actions_counts_turns_after_the_prefix(tmp_path: Path) -> None:
    path = FIXTURES / "2.4.6" / "format_error" / "trajectory.traj.json"
    first, steps = continued_actions(path, 1, 1)
    assert first is not None and first.tools == () and steps == 3  # format error, fix, submission
    first, steps = continued_actions(path, 2, 3)
    assert first is not None and first.tools[0][1]["command"].startswith("echo COMPLETE") and steps == 1
    with pytest.raises(ReplayError) as caught:
        continued_actions(tmp_path / "missing.json", 1, 1)
    assert caught.value.kind is ErrorKind.CONTINUATION
    broken = tmp_path / "broken.json"
    broken.write_text("[]")
    with pytest.raises(ReplayError) as caught:
        continued_actions(broken, 1, 1)
    assert caught.value.kind is ErrorKind.CONTINUATION and "does not parse" in caught.value.message
