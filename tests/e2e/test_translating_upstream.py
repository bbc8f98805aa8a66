"""Real Claude Code and real Codex continued through `--upstream openai-chat`: their own protocol at the gate, Chat
Completions to the model (ScriptedModel's Chat endpoint on loopback), the answer translated back as it streams.

Each request ScriptedModel received must be a valid Chat Completions request (the `openai` package's types), the
translated answer must make the real agent execute the scripted next action, and the agent must finish.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
from openai.types.chat.completion_create_params import CompletionCreateParamsStreaming
from pydantic import TypeAdapter

from forkpoint import runtimes
from forkpoint.core.results import ReplayResult
from forkpoint.testing import ScriptedModel
from forkpoint.testing.recordings import replay_recording
from forkpoint.testing.scripted_model import text, tool_use

pytestmark = pytest.mark.e2e

FIXTURES = Path(__file__).parents[1] / "fixtures"
REQUEST: TypeAdapter[Any] = TypeAdapter(CompletionCreateParamsStreaming)
MESSAGE: TypeAdapter[Any] = TypeAdapter(ChatCompletionMessageParam)
TOOL: TypeAdapter[Any] = TypeAdapter(ChatCompletionToolParam)
CASES = [("claude-code", "2.1.220", "single_bash", "session.jsonl"),
         ("claude-code", "2.1.332", "single_bash", "session.jsonl"),
         ("codex", "0.149.0", "exec_basic", "rollout.jsonl"),
         ("codex", "0.171.0", "exec_basic", "rollout.jsonl")]


def _valid_chat_request(body: dict[str, Any]) -> None:
    REQUEST.validate_python(body)  # the openai types validate nested iterables lazily: check each list too
    assert body["messages"] and body["stream"] is True
    for message in body["messages"]:
        MESSAGE.validate_python(message)
    for tool in body.get("tools") or []:
        TOOL.validate_python(tool)
    called = {call["id"] for m in body["messages"] if m["role"] == "assistant" for call in m.get("tool_calls") or []}
    answered = [m["tool_call_id"] for m in body["messages"] if m["role"] == "tool"]
    assert set(answered) <= called, "every tool message answers a tool call of an earlier assistant message"


def _continue_through_chat(agent: str, version: str, scenario: str, trajectory: str, tmp_path: Path,
                           monkeypatch: pytest.MonkeyPatch, **choices: Any) -> tuple[ReplayResult, ScriptedModel]:
    """Replay the fixture's first batch and continue the real agent through --upstream openai-chat."""
    if runtimes.find(agent, version) is None:
        pytest.skip(f"{agent} {version} is not installed")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-chat-key")
    fixture = FIXTURES / agent.replace("-", "_") / version / scenario
    model = ScriptedModel.from_file(fixture / "script.json")
    with model.serve() as url:
        result = replay_recording(fixture, tmp_path, agent=agent, trajectory=trajectory, after=1,
                                  upstream="openai-chat", upstream_url=f"{url}/v1", **choices)
    return result, model


@pytest.mark.parametrize(("agent", "version", "scenario", "trajectory"), CASES, ids=lambda v: str(v))
def test_the_real_agent_continues_through_a_chat_completions_model(
    agent: str, version: str, scenario: str, trajectory: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, model = _continue_through_chat(agent, version, scenario, trajectory, tmp_path, monkeypatch)
    assert result.failure is None, result.failure
    assert (result.phase, result.agent_status) == ("continued", "completed")
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] >= 1 and bridge["refused"] == 0 and bridge["forwarded"] == bridge["validated"]
    reported = model.reported_usage()  # model_usage: the sums of what ScriptedModel's answers reported
    assert {key: result.metadata["model_usage"][key] for key in reported} == reported
    assert reported["calls"] == bridge["forwarded"] == reported["calls_with_usage"]
    chat = [entry for entry in model.requests if entry.get("path", "").endswith("/chat/completions")
            and entry.get("kind") == "main"] or [entry for entry in model.requests
                                                 if "messages" in entry.get("body", {})]
    assert chat, model.requests
    for entry in chat:
        _valid_chat_request(entry["body"])
    assert "__forkpoint_nonce_" not in json.dumps(chat)
    out = Path(result.output_dir or "")
    next_action = json.loads((out / "next-action.json").read_text())
    assert next_action["replayed"] is not None
    assert next_action["metrics"]["same_tool_calls"] is True, next_action


@pytest.mark.parametrize(("agent", "version", "scenario", "trajectory"), CASES, ids=lambda v: str(v))
def test_model_and_sampling_pins_reach_the_chat_model_on_the_translated_request(
    agent: str, version: str, scenario: str, trajectory: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, model = _continue_through_chat(agent, version, scenario, trajectory, tmp_path, monkeypatch,
                                           model="open-model-7b", temperature=0.0, seed=7, disable_thinking=True)
    assert result.failure is None, result.failure
    assert result.agent_status == "completed"
    chat = [entry["body"] for entry in model.requests if "messages" in entry.get("body", {})]
    assert chat
    for body in chat:
        _valid_chat_request(body)
        assert (body["model"], body["temperature"], body["seed"]) == ("open-model-7b", 0.0, 7)
        assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert result.metadata["requested_model"] == result.metadata["upstream_model"] == "open-model-7b"


def test_the_real_gemini_cli_continues_through_a_chat_completions_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gemini CLI's model and streaming choice are in the URL: the translation reads them from the route, the Chat
    model gets a valid streamed request, and its tool call reaches the real CLI as a functionCall it runs."""
    if runtimes.find("gemini-cli", "0.61.0") is None:
        pytest.skip("gemini-cli 0.61.0 is not installed")
    monkeypatch.setenv("OPENAI_API_KEY", "scripted-chat-key")
    model = ScriptedModel([[tool_use("read_file", {"file_path": "notes.txt"})], [text("Notes read.")]],
                          step_mode="counter", model="gemini-2.5-pro", seed="gemini-chat-e2e")
    with model.serve() as url:
        result = replay_recording(FIXTURES / "gemini_cli" / "0.61.0" / "tools", tmp_path, agent="gemini-cli",
                                  trajectory="session.jsonl", after=1, upstream="openai-chat",
                                  upstream_url=f"{url}/v1")
    assert result.failure is None, result.failure
    assert (result.phase, result.agent_status) == ("continued", "completed")
    bridge = result.metadata["model_bridge"]
    assert bridge["validated"] == bridge["forwarded"] == 2 and bridge["refused"] == 0
    chat = [entry["body"] for entry in model.requests]
    assert [entry["path"] for entry in model.requests] == ["/v1/chat/completions"] * 2
    for body in chat:
        _valid_chat_request(body)
        assert body["model"] == "gemini-2.5-pro"  # from the agent's URL path
    fresh = [m for m in chat[0]["messages"] if m["role"] == "tool"][-2:]
    assert all(m["content"].startswith("Successfully created and wrote") for m in fresh), fresh
    # the translated functionCall really ran in the CLI: its result (the file the replay wrote) came back
    assert chat[1]["messages"][-1]["role"] == "tool" and chat[1]["messages"][-1]["content"] == "todo\n"
    assert model.reported_usage()["calls"] == result.metadata["model_usage"]["calls"] == 2
