"""End to end with the REAL Qwen Code 0.24.4: inspect, prepare-only, replay-only and a continuation through
``--resume`` behind the bridge's Chat Completions gate.

ScriptedModel plays the model upstream (the only stand-in), reached through the bridge's pass-through Chat
upstream. The first forwarded request must end at the last fresh observation (plus the boundary prompt), without
the nonce or the CLI's date reminder, and the real CLI must execute the scripted next action.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from forkpoint import runtimes
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import e2e_boundaries, replay_recording
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = pytest.mark.e2e

FIXTURE = Path(__file__).parents[1] / "fixtures" / "qwen_code" / "0.24.4" / "tools"
CWD = "/tmp/forkpoint-rec-qwen/tools"
PROMPT = "Before going on, say what you found so far."


@pytest.fixture(autouse=True)
def _runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    if runtimes.find("qwen-code", "0.24.4") is None:
        pytest.skip("qwen-code 0.24.4 is not installed (forkpoint agents install qwen-code@0.24.4)")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-upstream-key")


def test_inspect_detects_qwen_code_and_names_its_verified_version() -> None:
    done = subprocess.run([sys.executable, "-m", "forkpoint.cli", "inspect", "--json", str(FIXTURE / "session.jsonl")],
                          capture_output=True, timeout=120, check=True)
    document = json.loads(done.stdout)
    assert document["agent"] == "qwen-code" and document["recorded_version_status"] == "verified"
    assert document["cwd"] == CWD and document["complete_batches"] == 6


def test_replay_only_re_runs_every_call_with_the_cli_and_matches_exactly(tmp_path: Path) -> None:
    """Through batch 4: the edit after batch 3's read_file succeeds only when one CLI process runs both (0.24.4's
    edit refuses a file not read in the same session)."""
    result = replay_recording(FIXTURE, tmp_path, agent="qwen-code", trajectory="session.jsonl", after=4,
                              replay_only=True)
    document = result.to_json()
    assert document["failure"] is None, document["failure"]
    assert document["observations_match"] == "exact" and document["quality"] == "verified"
    # the real tools ran in the workspace: the write and the edit are there
    assert (Path(CWD) / "notes.txt").read_text() == "todo\n"
    assert (Path(CWD) / "greet.py").read_text() == "print('hello world')\n"


def test_prepare_only_writes_the_recorded_prefix_without_running_anything(tmp_path: Path) -> None:
    result = replay_recording(FIXTURE, tmp_path, agent="qwen-code", trajectory="session.jsonl", after=2,
                              prepare_only=True)
    document = result.to_json()
    assert document["failure"] is None, document["failure"]
    prefix = Path(next(a["path"] for a in document["artifacts"] if a["role"] == "native_prefix"))
    recorded = (FIXTURE / "session.jsonl").read_text().splitlines()
    written = prefix.read_text().splitlines()
    # every record up to batch 2's tool_result, unchanged; nothing ran (no notes.txt in the workspace)
    assert [json.loads(line)["uuid"] for line in written] == [json.loads(line)["uuid"] for line in recorded][
        :len(written)]
    assert json.loads(written[-1])["type"] == "tool_result" and not (Path(CWD) / "notes.txt").exists()


@pytest.mark.parametrize("after", e2e_boundaries([1, 6]))  # the sandbox file continues after 1 too
def test_continue_runs_the_next_action_on_the_fresh_prefix(tmp_path: Path, after: int) -> None:
    """With a boundary prompt (after 6) the nonce becomes it; without one (after 1) the first request ends at
    the last fresh observation and the nonce's record leaves the continued file."""
    prompt = PROMPT if after > 1 else None
    model = ScriptedModel([[tool_use("read_file", {"file_path": f"{CWD}/notes.txt"})], [text("Notes read.")]],
                          step_mode="counter", model="qwen3-coder-plus", seed="qwen-e2e")
    with model.serve() as url:
        result = replay_recording(FIXTURE, tmp_path, agent="qwen-code", trajectory="session.jsonl", after=after,
                                  upstream="openai-chat", upstream_url=f"{url}/v1", boundary_user_prompt=prompt)
    document = result.to_json()
    assert document["phase"] == "continued" and document["failure"] is None, document["failure"]
    assert document["quality"] == "verified" and document["observations_match"] == "exact"
    assert document["continued_steps"] == 2
    first = model.requests[0]["body"]
    assert first["model"] == "qwen3-coder-plus"
    messages = first["messages"]
    if prompt:  # as ``qwen -p PROMPT`` sends it: the CLI's regenerated reminders, then the prompt
        assert messages[-1]["role"] == "user" and messages[-1]["content"][-1] == {"type": "text", "text": PROMPT}
        assert "authoritative current date" in json.dumps(messages[-1]["content"][:-1])
        assert messages[-2]["role"] == "tool"
    else:
        assert messages[-1]["role"] == "tool" and "authoritative current date" not in json.dumps(messages[-1])
    assert "__forkpoint_nonce" not in json.dumps(first)
    # the next action really ran: the CLI read the file the replayed write_file made, and sent it back
    second = model.requests[1]["body"]["messages"][-1]
    assert second["role"] == "tool" and second["content"] == [{"type": "text", "text": "todo\n"}]
    continued = Path(next(a["path"] for a in document["artifacts"] if a["role"] == "continued_native_session"))
    assert "__forkpoint_nonce" not in continued.read_text()
    assert prompt is None or prompt in continued.read_text()
