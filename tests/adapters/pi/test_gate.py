"""The Pi gate against the requests the real Pi sent while recording (tests/fixtures/pi/0.83.0/*/requests.jsonl).

The expected prefix is computed from the recorded session's messages up to batch N; the request the same Pi sent
right after batch N must pass unchanged (continue(): no envelope), and every deviation must be refused.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.pi.gate import PROFILE, expected_prefix
from forkpoint.adapters.pi.parse import parse_pi
from forkpoint.bridge.protocols.openai_chat import ChatGate

FIXTURES = Path(__file__).parents[2] / "fixtures" / "pi" / "0.83.0"
SCENARIOS = ("single_bash", "parallel", "file_tools", "error_result", "unknown_tool", "unknown_tools", "optional_tools",
             "long_session")
NONCE = "__forkpoint_nonce_0123456789abcdef0123456789abcdef__"


def _cases() -> list[tuple[str, int]]:
    return [(s, n) for s in SCENARIOS for n in range(1, parse_pi(FIXTURES / s / "session.jsonl").complete_count + 1)]


def _setup(scenario: str, after: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    parsed = parse_pi(FIXTURES / scenario / "session.jsonl")
    messages = parsed.native.messages[: parsed.native.batch_end[after - 1] + 1]
    requests = [json.loads(line) for line in (FIXTURES / scenario / "requests.jsonl").read_text().splitlines()]
    body = next(r["body"] for r in requests if r["step"] == after)
    return messages, body


@pytest.mark.parametrize(("scenario", "after"), _cases())
def test_recorded_request_after_batch_n_passes_unchanged(scenario: str, after: int) -> None:
    messages, body = _setup(scenario, after)
    gate = ChatGate(PROFILE, expected_prefix(messages, None))
    verdict = gate.first(copy.deepcopy(body))
    assert verdict.ok, verdict.reason
    assert verdict.body == body
    assert verdict.facts["message_count"] == len(body["messages"]) - 1
    later = gate.later(copy.deepcopy(body))
    assert later.ok and later.facts["continuation_messages"] == 0


@pytest.mark.parametrize(("scenario", "after"), _cases())
def test_the_request_after_another_batch_is_refused(scenario: str, after: int) -> None:
    messages, _ = _setup(scenario, after)
    requests = [json.loads(line) for line in (FIXTURES / scenario / "requests.jsonl").read_text().splitlines()]
    gate = ChatGate(PROFILE, expected_prefix(messages, None))
    for other in requests:
        if other["step"] != after:
            verdict = gate.first(other["body"])
            assert not verdict.ok, other["step"]


def test_a_changed_observation_is_refused_and_named() -> None:
    messages, body = _setup("parallel", 1)
    body["messages"][4]["content"] = "tampered\n"
    verdict = ChatGate(PROFILE, expected_prefix(messages, None)).first(body)
    assert not verdict.ok and verdict.reason is not None
    assert "messages[4]" in verdict.reason and "observation of call_par_2 differs" in verdict.reason


def test_reordered_parallel_results_are_refused() -> None:
    messages, body = _setup("parallel", 1)
    body["messages"][3], body["messages"][4] = body["messages"][4], body["messages"][3]
    assert not ChatGate(PROFILE, expected_prefix(messages, None)).first(body).ok


def test_continue_request_with_a_trailing_user_message_is_refused() -> None:
    messages, body = _setup("single_bash", 1)
    body["messages"].append({"role": "user", "content": [{"type": "text", "text": "continue"}]})
    verdict = ChatGate(PROFILE, expected_prefix(messages, None)).first(body)
    assert not verdict.ok and verdict.reason is not None and "follows the boundary" in verdict.reason


def test_missing_message_and_changed_call_are_refused() -> None:
    messages, body = _setup("file_tools", 2)
    short = copy.deepcopy(body)
    short["messages"].pop()
    verdict = ChatGate(PROFILE, expected_prefix(messages, None)).first(short)
    assert not verdict.ok and verdict.reason is not None and "missing" in verdict.reason
    changed = copy.deepcopy(body)
    changed["messages"][2]["tool_calls"][0]["function"]["arguments"] = '{"path":"other.txt","content":"x"}'
    verdict = ChatGate(PROFILE, expected_prefix(messages, None)).first(changed)
    assert not verdict.ok and verdict.reason is not None and "messages[2]" in verdict.reason


def test_prompt_path_swaps_the_nonce_for_the_boundary_prompt() -> None:
    messages, body = _setup("single_bash", 1)
    prompt = "Now count the words too."
    nonce_body = copy.deepcopy(body)
    nonce_body["messages"].append({"role": "user", "content": [{"type": "text", "text": NONCE}]})
    gate = ChatGate(PROFILE, expected_prefix(messages, NONCE), prompt)
    verdict = gate.first(nonce_body)
    assert verdict.ok, verdict.reason
    assert verdict.body is not None
    assert verdict.body["messages"][:-1] == body["messages"]
    assert verdict.body["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": prompt}]}
    assert NONCE not in json.dumps(verdict.body)
    # a later request: prefix, nonce, then the live continuation
    later_body = copy.deepcopy(nonce_body)
    later_body["messages"] += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}]
    later = gate.later(later_body)
    assert later.ok and later.body is not None and later.facts["continuation_messages"] == 2
    assert later.body["messages"][len(body["messages"])]["content"][0]["text"] == prompt


def test_prompt_path_refusals() -> None:
    messages, body = _setup("single_bash", 1)
    gate = ChatGate(PROFILE, expected_prefix(messages, NONCE), "prompt")
    assert not gate.first(body).ok  # the nonce is missing
    twice = copy.deepcopy(body)
    twice["messages"].append({"role": "user", "content": [{"type": "text", "text": NONCE}]})
    twice["messages"][1]["content"][0]["text"] += NONCE
    verdict = gate.first(twice)
    assert not verdict.ok and verdict.reason is not None and "occurs 2 times" in verdict.reason
    quoted = copy.deepcopy(body)
    quoted["messages"].append({"role": "user", "content": f'"{NONCE}"'})
    assert not gate.first(quoted).ok
    assert not ChatGate(PROFILE, expected_prefix(messages, NONCE), None).first(body).ok  # inconsistent configuration
    nonce_body = copy.deepcopy(body)
    nonce_body["messages"].append({"role": "user", "content": [{"type": "text", "text": NONCE}]})
    verdict = ChatGate(PROFILE, expected_prefix(messages, NONCE), f"say {NONCE}").first(nonce_body)
    assert not verdict.ok and verdict.reason == "the resume nonce remains in the cleaned request"
    verdict = ChatGate(PROFILE, expected_prefix(messages, NONCE), " ").first(nonce_body)
    assert not verdict.ok and verdict.reason == "the configured boundary prompt is empty"


def test_unknown_roles_and_bad_bodies_are_refused() -> None:
    messages, body = _setup("single_bash", 1)
    gate = ChatGate(PROFILE, expected_prefix(messages, None))
    assert not gate.first([]).ok
    assert not gate.first({"messages": "x"}).ok
    odd = copy.deepcopy(body)
    odd["messages"][2]["role"] = "function"
    assert not gate.first(odd).ok


def test_expected_prefix_must_end_with_tool_results() -> None:
    messages, _ = _setup("single_bash", 1)
    with pytest.raises(ValueError):
        expected_prefix(messages[:-1], None)


def test_another_model_is_refused() -> None:
    messages, body = _setup("single_bash", 2)
    gate = ChatGate(PROFILE, expected_prefix(messages, None, "scripted-model"))
    assert gate.first(copy.deepcopy(body)).ok
    verdict = gate.first({**body, "model": "gpt-other"})
    assert not verdict.ok and verdict.reason is not None and "gpt-other" in verdict.reason


def test_another_tool_set_is_refused() -> None:
    """Pi writes its enabled tools nowhere; the continuation must offer the model the set the recording shows."""
    messages, body = _setup("optional_tools", 2)
    enabled = ("read", "bash", "edit", "write", "grep", "find", "ls")
    gate = ChatGate(PROFILE, expected_prefix(messages, None, None, enabled))
    offered = [{"type": "function", "function": {"name": name, "parameters": {}}} for name in enabled]
    assert gate.first({**body, "tools": offered}).ok
    for wrong in (offered[:4], [*offered[:4], *offered[5:]], [offered[4], *offered[:4], *offered[5:]], "tools",
                  [{"type": "function"}, *offered[1:]], None):
        verdict = gate.first({**body, "tools": wrong})
        assert not verdict.ok and verdict.reason is not None and "enabled tool set" in verdict.reason, wrong
    assert expected_prefix(messages, None, None, enabled).to_json()["tools"] == list(enabled)
