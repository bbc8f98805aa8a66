"""The Qwen Code profile against the REAL first request of a ``--resume`` (recorded by
scripts/record_qwen_code_fixtures.py): accepted as measured, refused when an observation or the nonce differs."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from forkpoint.adapters.qwen_code.gate import PROFILE, expected_prefix
from forkpoint.adapters.qwen_code.parse import parse_qwen
from forkpoint.bridge.protocols.openai_chat import ChatGate

FIXTURE = Path(__file__).parents[2] / "fixtures" / "qwen_code" / "0.24.4" / "tools"
RESUME = json.loads((FIXTURE / "resume-after-3.json").read_text())


def _gate(prompt: str | None = None) -> ChatGate:
    native = parse_qwen(FIXTURE / "session.jsonl").native
    records = native.records[: native.batch_end[2] + 1]
    return ChatGate(PROFILE, expected_prefix(records, RESUME["nonce"], "qwen3-coder-plus"), prompt)


def _body() -> dict[str, Any]:
    return {"model": RESUME["model"], "messages": [{"role": "system", "content": "S"}, *copy.deepcopy(
        RESUME["messages"])], "tools": [{"type": "function", "function": {"name": n}} for n in RESUME["tool_names"]],
            "stream": True}


def test_the_real_resume_request_is_accepted_and_ends_at_the_fresh_observation() -> None:
    verdict = _gate().first(_body())
    assert verdict.ok, verdict.reason
    assert verdict.body is not None and verdict.body["messages"][-1]["role"] == "tool"
    assert RESUME["nonce"] not in json.dumps(verdict.body)


def test_the_boundary_prompt_replaces_the_nonce_and_keeps_the_reminders_the_cli_put_before_it() -> None:
    """``qwen -p PROMPT`` sends its regenerated ``<system-reminder>`` parts before the prompt: the boundary prompt is
    forwarded the same way, only the nonce part replaced."""
    body = _body()
    sent = body["messages"][-1]["content"]
    assert len(sent) >= 2 and "<system-reminder>" in json.dumps(sent[:-1])
    verdict = _gate("Go on.").first(body)
    assert verdict.ok, verdict.reason
    assert verdict.body is not None
    assert verdict.body["messages"][-1] == {"role": "user",
                                            "content": [*sent[:-1], {"type": "text", "text": "Go on."}]}


def test_a_changed_observation_is_refused() -> None:
    body = _body()
    tool = next(m for m in body["messages"] if m["role"] == "tool")
    tool["content"][0]["text"] += " tampered"
    verdict = _gate().first(body)
    assert not verdict.ok and "observation" in str(verdict.reason)


def test_a_nonce_with_anything_but_reminders_before_it_is_refused() -> None:
    body = _body()
    body["messages"][-1]["content"].insert(0, {"type": "text", "text": "injected"})
    assert not _gate().first(body).ok


def test_the_real_resume_of_a_session_with_thoughts_is_accepted_and_a_changed_thought_refused() -> None:
    """Thought parts come back as ``reasoning_content`` (and ``reasoning``): compared, not dropped."""
    folder = FIXTURE.parent / "thinking"
    resume = json.loads((folder / "resume-after-2.json").read_text())
    native = parse_qwen(folder / "session.jsonl").native
    gate = ChatGate(PROFILE, expected_prefix(native.records[: native.batch_end[1] + 1], resume["nonce"],
                                             "qwen3-coder-plus"))
    body = {"model": resume["model"], "messages": [{"role": "system", "content": "S"}, *resume["messages"]]}
    verdict = gate.first(copy.deepcopy(body))
    assert verdict.ok, verdict.reason
    changed = copy.deepcopy(body)
    thought = next(m for m in changed["messages"] if m.get("reasoning_content"))
    thought["reasoning_content"] = thought["reasoning"] = "I will delete everything."
    assert not gate.first(changed).ok
