"""End to end with the REAL codex binaries: replay + continue recorded rollouts through the Responses bridge.

ScriptedModel plays the model upstream (the only stand-in). Every recorded rollout is replayed at every boundary
in a workspace restored to the recording's initial state at the recorded path; the gate must pass, the fresh
observations must equal the historical ones (up to the documented volatile fields), and the real codex must
execute the scripted next action.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.codex.parse import parse_rollout
from forkpoint.core.results import ReplayResult
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import e2e_boundaries, replay_recording

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures" / "codex"
VERSIONS = ("0.149.0", "0.171.0")
EVERY_BOUNDARY = os.environ.get("FORKPOINT_E2E_EVERY_BOUNDARY") == "1"


def _cases() -> list[tuple[str, str, int]]:
    cases = []
    for version in VERSIONS:
        for rollout in sorted((FIXTURES / version).glob("*/rollout.jsonl")):
            if rollout.parent.name == "view_image":  # one boundary of it: test_view_image_continues_with_the_image
                continue
            count = parse_rollout(rollout).complete_count
            # first, middle and last on the newest version, the last on the older one (its prefix holds every
            # observation the earlier ones hold; the envelope differs per version, not per boundary; CI time).
            # Every boundary is replayed by tests/adapters/codex/test_fixture_fidelity.py without continuing, and
            # continued by benchmarks/continuation_fidelity.py; FORKPOINT_E2E_EVERY_BOUNDARY=1 runs them all here.
            chosen = e2e_boundaries(range(1, count + 1))
            for after in chosen if version == VERSIONS[-1] or EVERY_BOUNDARY else chosen[-1:]:
                cases.append((version, rollout.parent.name, after))
    return cases


def _require_runtime(version: str) -> None:
    if runtimes.find("codex", version) is None:
        pytest.skip(f"codex {version} is not installed (forkpoint agents install codex@{version})")


def run(fixture: Path, tmp_path: Path, after: int, **overrides: Any) -> ReplayResult:
    return replay_recording(fixture, tmp_path, agent="codex", trajectory="rollout.jsonl", after=after, **overrides)


@pytest.mark.parametrize(("version", "scenario", "after"), _cases(), ids=lambda v: str(v))
def test_replay_and_continue_every_boundary(
    version: str, scenario: str, after: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _require_runtime(version)
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    fixture = FIXTURES / version / scenario
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture, tmp_path, after, upstream="openai-responses", upstream_url=f"{url}/v1")
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0 and bridge["forwarded"] == bridge["validated"]
    reported = model.reported_usage()  # model_usage: the sums of what ScriptedModel's answers reported
    assert {key: result.metadata["model_usage"][key] for key in reported} == reported
    assert reported["calls"] == bridge["forwarded"] == reported["calls_with_usage"]
    assert reported["input_tokens"] == 100 * reported["calls"]
    out = Path(result.output_dir or "")
    observations = json.loads((out / "observations.json").read_text())["observations"]
    assert observations and all(row["exact"] for row in observations), observations
    main = [entry for entry in model.requests if entry.get("kind") == "main"]
    first_input = main[0]["body"]["input"]
    boundary_ids = {row["id"] for row in observations if row["batch"] == after}
    tail_ids = set()
    for item in reversed(first_input):
        if item.get("type") not in ("function_call_output", "custom_tool_call_output"):
            break
        tail_ids.add(item["call_id"])
    assert tail_ids == boundary_ids  # the first forwarded request ends exactly at O'N
    assert "__forkpoint_nonce_" not in json.dumps(main)
    next_action = json.loads((out / "next-action.json").read_text())
    assert next_action["replayed"] is not None
    assert next_action["metrics"]["same_tool_calls"] is True, next_action
    continued = next((out / "native" / "continued").glob("rollout-*.jsonl"))
    assert "__forkpoint_nonce_" not in continued.read_text()


@pytest.mark.parametrize(("version", "detail"), [("0.149.0", "high"), ("0.171.0", "original")])
def test_view_image_continues_with_the_image(
    version: str, detail: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A re-run view_image (a JPEG) is rebuilt into the rollout and reaches the model through the gate unchanged:
    the continuation's first request carries the file's exact bytes as Codex's data URL."""
    _require_runtime(version)
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    fixture = FIXTURES / version / "view_image"
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture, tmp_path, 2, upstream="openai-responses", upstream_url=f"{url}/v1")
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("continued", "verified", "completed")
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0
    out = Path(result.output_dir or "")
    observations = json.loads((out / "observations.json").read_text())["observations"]
    assert [row["exact"] for row in observations] == [True, True], observations
    jpeg = base64.b64encode((fixture / "workspace-initial" / "photo.jpg").read_bytes()).decode()
    first = next(entry for entry in model.requests if entry.get("kind") == "main")["body"]["input"]
    assert first[-1]["type"] == "function_call_output"
    assert first[-1]["output"] == [{"type": "input_image", "image_url": f"data:image/jpeg;base64,{jpeg}",
                                    "detail": detail}]
    continued = next((out / "native" / "continued").glob("rollout-*.jsonl")).read_text()
    assert f"data:image/jpeg;base64,{jpeg}" in continued


@pytest.mark.parametrize("version", VERSIONS)
def test_stub_upstream_and_boundary_prompt(version: str, tmp_path: Path) -> None:
    _require_runtime(version)
    fixture = FIXTURES / version / "exec_basic"
    prompt = "Check the listing once more before reading."
    result = run(fixture, tmp_path, 1, upstream="stub", boundary_user_prompt=prompt)
    assert result.failure is None, result.failure
    assert result.phase == "continued" and result.metadata["boundary_user_prompt"]["injected"] is True
    continued = next((Path(result.output_dir or "") / "native" / "continued").glob("rollout-*.jsonl"))
    assert prompt in continued.read_text()
    for name in ("result.json", "replay-summary.json", "replay-events.jsonl"):
        assert prompt not in (Path(result.output_dir or "") / name).read_text()


@pytest.mark.parametrize("version", VERSIONS)
def test_step_budget_is_enforced_at_the_bridge(version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _require_runtime(version)
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")
    fixture = FIXTURES / version / "exec_basic"
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = run(fixture, tmp_path, 1, upstream="openai-responses", upstream_url=f"{url}/v1", max_steps=2)
    assert result.failure is None, result.failure
    assert result.agent_status == "max_steps"
    assert len([e for e in model.requests if e.get("kind") == "main"]) == 1


def test_wrong_binary_version_is_refused(tmp_path: Path) -> None:
    _require_runtime("0.171.0")
    other = runtimes.find("codex", "0.171.0")
    assert other is not None
    result = run(FIXTURES / "0.149.0" / "exec_basic", tmp_path, 1, upstream="stub",
                 agent_entrypoint=str(other.entrypoint))
    assert result.failure is not None and (result.failure.category, result.exit_code) == ("unsupported_version", 11)
    assert not (tmp_path / "out" / "run-1").exists()


def test_unknown_tool_and_missing_session_meta(tmp_path: Path) -> None:
    source = (FIXTURES / "0.149.0" / "exec_basic" / "rollout.jsonl").read_text().splitlines()
    no_meta = tmp_path / "no-meta.jsonl"
    no_meta.write_text("\n".join(source[1:]) + "\n")
    result = execute(build_request({"agent": "codex", "trajectory": str(no_meta), "after_step": 1,
                                    "prepare_only": True, "output_dir": str(tmp_path / "o")}, source="test"))
    assert result.failure is not None and result.exit_code == 10 and "session_meta" in result.failure.message
    unknown = tmp_path / "rollout-unknown.jsonl"
    unknown.write_text("\n".join(line.replace('"name":"exec_command"', '"name":"teleport"') for line in source) + "\n")
    fixture = FIXTURES / "0.149.0" / "exec_basic"
    result = replay_recording(fixture, tmp_path, agent="codex", trajectory=unknown, after=1, replay_only=True,
                              output_dir=str(tmp_path / "o2"))
    assert result.failure is not None and result.exit_code == 11 and "teleport" in result.failure.message


def test_a_040_view_image_recording_continues_after_its_image_message(tmp_path: Path) -> None:
    """Codex 0.40's view_image (fixture view_image_040): the batch ends with the image message after the constant
    output; the rebuilt rollout carries it, the resumed codex sends it, and the gate compares it as history (it
    refused the request on the old code: a user message between the last output and the nonce)."""
    _require_runtime(VERSIONS[0])
    result = run(FIXTURES / "0.40.0" / "view_image_040", tmp_path, 2, upstream="stub", sandbox="bwrap")
    assert result.failure is None, result.failure
    document = result.to_json()
    assert document["observations_match"] == "exact" and document["agent_status"] == "completed"
