"""End to end with the REAL Gemini CLI 0.61.0: replay + continue through ``--session-file`` behind the bridge.

ScriptedModel plays the model upstream (the only stand-in), reached through the bridge's pass-through Gemini
upstream. The first forwarded request must end at the last fresh observation (plus the boundary prompt), without
the nonce or the CLI's "interrupted" envelope, and the real CLI must execute the scripted next action.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import replay_recording
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = pytest.mark.e2e

FIXTURE = Path(__file__).parents[1] / "fixtures" / "gemini_cli" / "0.61.0" / "tools"
PROMPT = "Before going on, say what you found so far."


@pytest.fixture(autouse=True)
def _runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("gemini-cli", "0.61.0") is None:
        pytest.skip("gemini-cli 0.61.0 is not installed (forkpoint agents install gemini-cli@0.61.0)")
    monkeypatch.setenv("GEMINI_API_KEY", "scripted-upstream-key")


def test_continue_after_batch_1_runs_the_next_action_on_the_fresh_prefix(tmp_path: Path) -> None:
    model = ScriptedModel([[tool_use("read_file", {"file_path": "notes.txt"})], [text("Notes read.")]],
                          step_mode="counter", model="gemini-2.5-pro", seed="gemini-e2e")
    with model.serve() as url:
        result = replay_recording(FIXTURE, tmp_path, agent="gemini-cli", trajectory="session.jsonl", after=1,
                                  upstream="gemini", upstream_url=url, boundary_user_prompt=PROMPT)
    document = result.to_json()
    assert document["phase"] == "continued" and document["failure"] is None, document["failure"]
    assert document["quality"] == "verified" and document["observations_match"] == "exact"
    assert document["continued_steps"] == 2
    first = model.requests[0]
    assert first["path"] == "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    contents = first["body"]["contents"]
    assert contents[-1] == {"role": "user", "parts": [{"text": PROMPT}]}
    fresh = contents[-2]["parts"]
    assert [p["functionResponse"]["name"] for p in fresh] == ["write_file", "write_file"]
    assert fresh[0]["functionResponse"]["response"]["output"].startswith("Successfully created and wrote")
    assert "interrupted" not in json.dumps(contents) and "__forkpoint_nonce" not in json.dumps(first["body"])
    # the next action really ran: the CLI read the file the replayed write_file made, and answered with it
    second = model.requests[1]["body"]["contents"][-1]["parts"][0]["functionResponse"]
    assert second["name"] == "read_file" and second["response"] == {"output": "todo\n"}
    # the bridge read each answer's usageMetadata on the way through (the pass-through's usage tap)
    usage = document["metadata"]["model_usage"]
    reported = model.reported_usage()
    assert usage["calls"] == reported["calls"] == 2 and usage["input_tokens"] == reported["input_tokens"] > 0
    assert usage["output_tokens"] == reported["output_tokens"] > 0
    continued = Path(document["artifacts"]["continued_native"]) if "continued_native" in document.get(
        "artifacts", {}) else None
    assert continued is None or PROMPT in continued.read_text()
