"""End to end with the REAL OpenHands SDK 1.58.2 (its own venv, forkpoint's companion runner): replay-only and
continue (inspect and prepare-only, which need no SDK: tests/adapters/openhands_sdk).

ScriptedModel plays the model upstream (the only stand-in). A recorded conversation is replayed in a fresh
workspace at the recorded path: the SDK's own tools re-run batches 1..N (runner.py ``replay``), every fresh
observation must equal the historical one as the model reads it (no normalisation needed: the fixtures' outputs
are deterministic), the SDK resumes the rebuilt conversation from its persistence dir, its first request must pass
the gate, and it finishes the scripted task. Negative case: a tampered conversation folder is refused at its
first request with nothing forwarded.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.adapters.openhands_sdk import session
from forkpoint.adapters.openhands_sdk.format import model_parts
from forkpoint.adapters.openhands_sdk.parse import parse_conversation
from forkpoint.core.model import JsonObject
from forkpoint.core.results import ReplayResult
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import replay_recording

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures" / "openhands-sdk" / "1.58.2"
VERSION = "1.58.2"
CONVERSATION = "conversation/base_state.json"


@pytest.fixture(autouse=True)
def _runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("openhands-sdk", VERSION) is None:
        pytest.skip(f"openhands-sdk {VERSION} is not installed (forkpoint agents install openhands-sdk@{VERSION})")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")


def run(scenario: str, tmp_path: Path, after: int, trajectory: str | Path = CONVERSATION,
        **values: Any) -> ReplayResult:
    return replay_recording(FIXTURES / scenario, tmp_path, agent="openhands-sdk", trajectory=trajectory,
                            after=after, **values)


def out_dir(result: ReplayResult) -> Path:
    assert result.output_dir is not None, result.failure
    return Path(result.output_dir)


def observations(result: ReplayResult) -> list[JsonObject]:
    rows: list[JsonObject] = json.loads((out_dir(result) / "observations.json").read_text())["observations"]
    return rows


def prefix(result: ReplayResult) -> JsonObject:
    document: JsonObject = json.loads(next((out_dir(result) / "native" / "prefix").glob("*.json")).read_text())
    return document


def test_replay_only_reproduces_the_recorded_observations(tmp_path: Path) -> None:
    """Every tool of the fixture (terminal, file_editor incl. an error, task_tracker, think) re-run by the SDK; the
    SDK's tmux server leaves no socket behind in the shared /tmp/tmux-<uid>/."""
    shared = Path(f"/tmp/tmux-{os.getuid()}")

    def sdk_files() -> set[Path]:  # its sockets and its .openhands-socket-creation.lock
        return {p for p in shared.iterdir() if "openhands" in p.name} if shared.is_dir() else set()

    before = sdk_files()
    result = run("parallel", tmp_path, 5, replay_only=True)
    assert sdk_files() == before
    assert result.failure is None, result.failure
    assert (result.phase, result.quality, result.agent_status) == ("replayed", "degraded", "not_started")
    rows = observations(result)
    assert len(rows) == 8 and all(row["exact"] for row in rows), rows
    (replayed,) = tmp_path.glob("state/**/openhands-sdk/replay-out.json")
    produced = json.loads(replayed.read_text())
    assert len(produced) == 8  # and format.model_parts is the text the SDK itself renders for each fresh event
    assert all(entry["llm_text"] == model_parts(entry["event"]) for entry in produced)
    rebuilt = prefix(result)
    original = parse_conversation(FIXTURES / "parallel" / CONVERSATION).native.events
    assert [e["id"] for e in rebuilt["events"]] == [e["id"] for e in original[:len(rebuilt["events"])]]
    assert rebuilt["base_state"]["execution_status"] == "idle"
    assert rebuilt["base_state"]["leaf_event_id"] == rebuilt["events"][-1]["id"]


#: the boundary-prompt variant costs another ~30 s of SDK start-up: only with FORKPOINT_E2E_EVERY_BOUNDARY=1
PROMPTS = [None, "Also keep going."] if os.environ.get("FORKPOINT_E2E_EVERY_BOUNDARY") == "1" else [None]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_continue_resumes_the_rebuilt_conversation_through_the_sdk(tmp_path: Path, prompt: str | None) -> None:
    """Replay batches 1..5 with the SDK (terminal, a failing command, editor errors, an invalid and an unknown tool
    call answered by the SDK's own validation), resume the rebuilt conversation with the SDK, finish the task
    (with FORKPOINT_E2E_EVERY_BOUNDARY=1 also with a boundary user prompt, sent by the SDK's ``send_message``)."""
    scenario, after = "errors", 5
    # recorded with a model the SDK would send to the Responses API on its own: the bridge speaks Chat Completions
    conversation = tmp_path / "conversation"
    shutil.copytree(FIXTURES / scenario / "conversation", conversation)
    state = json.loads((conversation / "base_state.json").read_text())
    state["agent"]["llm"]["model"] = "openai/gpt-5"
    (conversation / "base_state.json").write_text(json.dumps(state))
    model = ScriptedModel.from_file(FIXTURES / scenario / "script.json", model="scripted")
    extra = {"boundary_user_prompt": prompt} if prompt else {}
    with model.serve() as url:
        result = run(scenario, tmp_path, after, upstream="openai-chat", upstream_url=f"{url}/v1",
                     trajectory=conversation / "base_state.json", **extra)
    assert result.failure is None, result.failure
    # a persisted SDK conversation names no SDK version: read as 1.58.2, degraded (docs/adapters/openhands-sdk.md)
    assert (result.phase, result.quality, result.agent_status) == ("continued", "degraded", "completed")
    assert all(row["exact"] for row in observations(result))
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0 and bridge["forwarded"] == bridge["validated"]
    script_turns = len(json.loads((FIXTURES / scenario / "script.json").read_text())["turns"])
    assert result.continued_steps == script_turns - after  # the scripted rest of the task, finish included
    assert {r["path"] for r in model.requests} == {"/v1/chat/completions"}
    assert model.requests[0]["body"]["model"] == "gpt-5"
    first = model.requests[0]["body"]["messages"]
    assert first[-1]["role"] == ("user" if prompt else "tool") and len(model.requests) == bridge["forwarded"]
    next_action = json.loads((out_dir(result) / "next-action.json").read_text())
    assert next_action["metrics"]["same_tool_calls"] is True
    cwd = Path(json.loads((FIXTURES / scenario / "meta.json").read_text())["cwd"])
    assert (cwd / "sub" / "hello.txt").read_text() == "hello world\n"
    rows = observations(result)
    assert len(rows) == 5 and sum(1 for row in rows if "Error validating tool" in str(row)) >= 1, rows
    continued = parse_conversation(next((out_dir(result) / "native" / "continued").glob("*.json")))
    assert continued.complete_count == 6 and continued.session_id == prefix(result)["base_state"]["id"]


def test_a_tampered_conversation_is_refused_with_nothing_forwarded(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The SDK resumes a conversation folder other than the rebuilt prefix: its first request must be refused."""
    original = session.materialise

    def tampered(document: JsonObject, root: Path) -> Path:
        folder = original(document, root)
        last = sorted((folder / "events").glob("event-*.json"))[-1]
        event = json.loads(last.read_text())
        event["observation"]["content"][0]["text"] += "tampered\n"
        last.write_text(json.dumps(event))
        return folder

    monkeypatch.setattr(session, "materialise", tampered)
    model = ScriptedModel.from_file(FIXTURES / "basic" / "script.json", model="scripted")
    with model.serve() as url:
        result = run("basic", tmp_path, 1, upstream="openai-chat", upstream_url=f"{url}/v1")
    assert result.failure is not None and result.failure.category == "continuation_error", result.failure
    assert "refused" in result.failure.message and "messages[3]" in result.failure.message
    assert model.requests == []  # nothing reached the upstream
    assert result.exit_code == 40
