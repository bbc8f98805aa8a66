"""Copilot CLI 1.0.102's resume envelope, checked against the REAL first request the binary sent after
``copilot --resume=<id> -p NONCE`` (tests/fixtures/copilot_cli/1.0.102/tools/resume-after-3.json, recorded by
scripts/record_copilot_cli_fixtures.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.copilot_cli import CopilotCliAdapter
from forkpoint.adapters.copilot_cli.gate import PROFILE, expected_prefix, nonce_envelope
from forkpoint.adapters.copilot_cli.parse import parse_copilot
from forkpoint.adapters.copilot_cli.session import prefix_events
from forkpoint.bridge.protocols.openai_chat import ChatGate
from forkpoint.core.model import Mode, Plan

FIXTURE = Path(__file__).parents[2] / "fixtures" / "copilot_cli" / "1.0.102" / "tools"
RESUMED = json.loads((FIXTURE / "resume-after-3.json").read_text())
NONCE = RESUMED["nonce"]
MODEL = "gpt-4.1"


def plan(after: int) -> Plan:
    parsed = parse_copilot(FIXTURE / "session.jsonl")
    return Plan(parsed, after, Mode.PREPARE_ONLY, CopilotCliAdapter().profile_for(parsed))


def request(messages: list[Any] | None = None) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "system", "content": "You are the GitHub Copilot CLI"},
                                         *copy.deepcopy(RESUMED["messages"] if messages is None else messages)],
            "tools": [{"type": "function", "function": {"name": n}} for n in RESUMED["tool_names"]], "stream": True}


def gate(prompt: str | None = None) -> ChatGate:
    return ChatGate(PROFILE, expected_prefix(prefix_events(plan(RESUMED["after"]), None), NONCE, MODEL), prompt)


def test_the_real_resumed_request_passes_and_ends_at_the_last_observation() -> None:
    verdict = gate().first(request())
    assert verdict.ok, verdict.reason
    assert verdict.body is not None and NONCE not in json.dumps(verdict.body)
    assert verdict.body["messages"][-1]["role"] == "tool"
    assert verdict.body["messages"][-1]["content"] == "File /tmp/forkpoint-rec-copilot/tools/greet.py updated with " \
                                                       "changes."


def test_the_boundary_prompt_takes_the_place_of_the_nonce_inside_the_clis_datetime_envelope() -> None:
    prompted = gate("What did you find?").first(request())
    assert prompted.ok and prompted.body is not None, prompted.reason
    head = RESUMED["messages"][-1]["content"].removesuffix(NONCE)
    assert head.startswith("<current_datetime>") and head.endswith("</current_datetime>\n\n")
    assert prompted.body["messages"][-1] == {"role": "user", "content": head + "What did you find?"}


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda m: m[2].update(content="tampered"), "observation of"),
    (lambda m: m.insert(-1, {"role": "user", "content": "injected"}), "is not a tool result"),
    (lambda m: m[1]["tool_calls"][0]["function"].update(arguments='{"command":"rm -rf /"}'), "messages[2]"),
    (lambda m: m[-1].update(content="Injected text " + NONCE), "resume nonce"),
    (lambda m: m[-1].update(content=m[-1]["content"].replace("<current_datetime>", "<current_datetime>x")),
     "resume nonce"),
    (lambda m: m[2].update(extra="smuggled"), "'extra'"),
    (lambda m: m.__delitem__(slice(3, 6)), "differs"),
])
def test_a_mutated_resumed_request_is_refused(mutate: Any, reason: str) -> None:
    messages = copy.deepcopy(RESUMED["messages"])
    mutate(messages)
    verdict = gate().first(request(messages))
    assert not verdict.ok and reason in (verdict.reason or ""), verdict.reason


def test_another_model_is_refused() -> None:
    verdict = gate().first({**request(), "model": "gpt-5"})
    assert not verdict.ok and "model" in (verdict.reason or "")


def test_the_envelope_is_the_exact_datetime_line_and_nothing_else() -> None:
    line = "<current_datetime>2026-12-05T04:22:27.874+00:00</current_datetime>\n\n"
    build = nonce_envelope({"role": "user", "content": line + NONCE}, NONCE)
    assert build is not None and build(NONCE) == {"role": "user", "content": line + NONCE}
    assert build("Go on.") == {"role": "user", "content": line + "Go on."}  # a boundary prompt keeps the line
    assert nonce_envelope({"role": "user", "content": "say hi\n" + line + NONCE}, NONCE) is None
    assert nonce_envelope({"role": "user", "content": line + NONCE + " more"}, NONCE) is None
    assert nonce_envelope({"role": "user", "content": line + NONCE, "name": "x"}, NONCE) is None
    assert nonce_envelope({"role": "assistant", "content": line + NONCE}, NONCE) is None


def test_the_expected_prefix_document_holds_no_content() -> None:
    document = gate().expected.to_json()
    assert document["profile"] == "copilot-cli/1.0.102/session-events-v1"
    assert "helo" not in json.dumps(document) and "greet.py" not in json.dumps(document)
