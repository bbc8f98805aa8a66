"""Gemini CLI 0.61.0's resume envelope, checked against the REAL first request the binary sent after
``--session-file`` (tests/fixtures/gemini_cli/0.61.0/tools/resume-after-3.json, recorded by
scripts/record_gemini_cli_fixtures.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.gemini_cli import GeminiCliAdapter
from forkpoint.adapters.gemini_cli.gate import PROFILE, client_history, expected_prefix
from forkpoint.adapters.gemini_cli.parse import parse_gemini
from forkpoint.adapters.gemini_cli.session import prefix_messages
from forkpoint.bridge.protocols.gemini import GeminiGate
from forkpoint.core.model import Mode, Plan

FIXTURE = Path(__file__).parents[2] / "fixtures" / "gemini_cli" / "0.61.0" / "tools"
RESUMED = json.loads((FIXTURE / "resume-after-3.json").read_text())
MODEL = "gemini-2.5-pro"


def plan(after: int) -> Plan:
    parsed = parse_gemini(FIXTURE / "session.jsonl")
    return Plan(parsed, after, Mode.PREPARE_ONLY, GeminiCliAdapter().profile_for(parsed))


def request(contents: list[Any] | None = None) -> dict[str, Any]:
    return {"contents": copy.deepcopy(RESUMED["contents"] if contents is None else contents),
            "systemInstruction": {"parts": [{"text": "system"}]},
            "tools": [{"functionDeclarations": [{"name": n} for n in RESUMED["tool_names"]]}],
            "generationConfig": {"temperature": 1}}


def gate(prompt: str | None = None) -> GeminiGate:
    expected = expected_prefix(prefix_messages(plan(RESUMED["after"]), None), MODEL, RESUMED["nonce"])
    return GeminiGate(PROFILE, expected, prompt)


def test_the_real_resumed_request_passes_and_ends_at_the_last_observation() -> None:
    verdict = gate().first(request())
    assert verdict.ok, verdict.reason
    assert verdict.body is not None and RESUMED["nonce"] not in json.dumps(verdict.body)
    last = verdict.body["contents"][-1]
    assert last["role"] == "user" and {p["functionResponse"]["name"] for p in last["parts"]} == {
        "read_file", "list_directory"}
    prompted = gate("What did you find?").first(request())
    assert prompted.ok and prompted.body is not None
    assert prompted.body["contents"][-1] == {"role": "user", "parts": [{"text": "What did you find?"}]}
    assert prompted.body["contents"][-2] == last


def test_the_binary_sends_each_function_response_twice_and_the_profile_expects_it() -> None:
    """convertSessionToClientHistory: the call's ``result`` and the user record that carries it (measured)."""
    history = client_history(prefix_messages(plan(1), None))
    responses = [p for p in history[-1]["parts"] if "functionResponse" in p]
    assert len(responses) == 2 and responses[0]["functionResponse"]["name"] == "write_file"


@pytest.mark.parametrize(("mutate", "reason"), [
    (lambda c: c[2]["parts"][0]["functionResponse"]["response"].update(output="tampered"), "observation of"),
    (lambda c: c.insert(-2, {"role": "user", "parts": [{"text": "injected"}]}), "resume envelope"),
    (lambda c: c.pop(-2), "resume envelope"),
    (lambda c: c[1]["parts"][1]["functionCall"]["args"].update(file_path="/etc/passwd"), "contents[1]"),
    (lambda c: c[0]["parts"].pop(0), "environment context"),
    (lambda c: c.__delitem__(slice(3, 5)), "differs"),
])
def test_a_mutated_resumed_request_is_refused(mutate: Any, reason: str) -> None:
    contents = copy.deepcopy(RESUMED["contents"])
    mutate(contents)
    verdict = gate().first(request(contents))
    assert not verdict.ok and reason in (verdict.reason or ""), verdict.reason


def test_the_expected_prefix_document_holds_no_content() -> None:
    document = gate().expected.to_json()
    assert document["profile"] == "gemini-cli/0.61.0/session-file-v1" and document["content_count"] == 7
    assert "helo" not in json.dumps(document) and document["boundary_calls"] == [
        "read_file", "list_directory", "read_file", "list_directory"]
