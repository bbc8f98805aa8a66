"""End to end with the REAL GitHub Copilot CLI 1.0.102: replay + ``copilot --resume`` through the bridge.

ScriptedModel plays the model upstream (the only stand-in): the CLI's documented BYOK provider
(``COPILOT_PROVIDER_BASE_URL``) is the bridge and ``COPILOT_OFFLINE=true``, so no GitHub service is asked. The
recording is replayed in a workspace restored to its initial state at the recorded path; the gate must pass, the
fresh observations must equal the historical ones, and the real CLI must execute the scripted next action on the
fresh prefix. Two boundaries (the first with a boundary prompt, the middle without one) keep the set short; the
tools test re-runs the other calls.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.adapters.copilot_cli.parse import parse_copilot
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import replay_recording
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = pytest.mark.e2e

FIXTURE = Path(__file__).parents[1] / "fixtures" / "copilot_cli" / "1.0.102" / "tools"
CWD = "/tmp/forkpoint-rec-copilot/tools"
PROMPT = "Before going on, say what you found so far."


@pytest.fixture(autouse=True)
def _runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("copilot-cli", "1.0.102") is None:
        pytest.skip("copilot-cli 1.0.102 is not installed (forkpoint agents install copilot-cli@1.0.102)")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")


def model() -> ScriptedModel:
    return ScriptedModel([[tool_use("view", {"path": f"{CWD}/notes.txt"})], [text("Notes read.")]],
                         step_mode="counter", model="gpt-4.1", seed="copilot-e2e")


def test_continue_after_batch_1_with_a_boundary_prompt_runs_the_next_action(tmp_path: Path) -> None:
    scripted = model()
    with scripted.serve() as url:
        result = replay_recording(FIXTURE, tmp_path, agent="copilot-cli", trajectory="session.jsonl", after=1,
                                  upstream="openai-chat", upstream_url=url + "/v1", boundary_user_prompt=PROMPT)
    document = result.to_json()
    assert document["phase"] == "continued" and document["failure"] is None, document["failure"]
    assert document["quality"] == "verified" and document["observations_match"] == "exact"
    assert document["continued_steps"] == 2
    first = scripted.requests[0]["body"]
    messages = first["messages"]
    assert messages[0]["role"] == "system" and first["model"] == "gpt-4.1"
    assert messages[-1]["role"] == "user" and messages[-1]["content"].endswith("\n\n" + PROMPT)
    assert messages[-1]["content"].startswith("<current_datetime>")
    assert messages[-2]["role"] == "tool" and messages[-2]["content"].startswith("greet.py\nsrc\ntodo\n<shellId: ")
    assert "__forkpoint_nonce" not in json.dumps(first)
    # the next action really ran: the CLI read the file the replayed bash wrote, and sent its content
    second = scripted.requests[1]["body"]["messages"]
    assert second[-1] == {"role": "tool", "tool_call_id": second[-2]["tool_calls"][0]["id"], "content": "todo\n"}
    continued = Path(next(a["path"] for a in document["artifacts"] if a["role"] == "continued_native_session"))
    parsed = parse_copilot(continued)
    assert PROMPT in continued.read_text() and parsed.session_id == parse_copilot(FIXTURE / "session.jsonl").session_id


def test_continue_after_batch_4_without_a_prompt_ends_the_first_request_at_the_fresh_observations(
        tmp_path: Path) -> None:
    scripted = model()
    with scripted.serve() as url:
        result = replay_recording(FIXTURE, tmp_path, agent="copilot-cli", trajectory="session.jsonl", after=4,
                                  upstream="openai-chat", upstream_url=url + "/v1")
    document = result.to_json()
    assert document["phase"] == "continued" and document["failure"] is None, document["failure"]
    assert document["observations_match"] == "exact" and document["continued_steps"] == 2
    messages = scripted.requests[0]["body"]["messages"]
    assert [m["role"] for m in messages[-3:]] == ["assistant", "tool", "tool"]
    assert messages[-2]["content"].startswith("Created file ") and messages[-1]["content"] == \
        "Parent directory does not exist"
    assert Path(CWD, "greet.py").read_text() == "print('hello world')\n"  # the replayed edit, then the live view
