"""The OpenCode gate and its manifest, on the REAL requests recorded from both binaries.

The manifest is built from the recorded session cut after batch N; the request is the one the same binary sent
right after batch N while recording (its system prompt restored as a stand-in text of the recorded hash is not
possible, so the system message is a fixed text and the manifest's system hash is left unset), plus the nonce.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.opencode.envelope import (
    BUILD_TOOLS,
    PROFILES,
    expected_prefix,
    masked_system_sha256,
    project_request_message,
    session_messages,
)
from forkpoint.adapters.opencode.gate import PROFILE, profile_for
from forkpoint.adapters.opencode.parse import parse_opencode
from forkpoint.adapters.opencode.session import cut_export
from forkpoint.bridge.protocols.openai_chat import ChatGate
from forkpoint.core.errors import ReplayError
from forkpoint.core.hashing import canonical_sha256
from forkpoint.core.model import Mode, Plan

FIXTURES = Path(__file__).parents[2] / "fixtures" / "opencode"
NONCE = "__forkpoint_nonce_0123456789abcdef0123456789abcdef__"
SYSTEM = "You are opencode.\n<env>\n  Today's date: Mon Nov 30 2026\n</env>"
#: the verified versions' fixtures (a 1.2 session continues on a verified binary: tests/e2e/test_cross_version.py)
CASES = [(p.parent.parent.name, p.parent.name, n) for p in sorted(FIXTURES.glob("*/*/export.json"))
         if p.parent.parent.name in PROFILES
         for n in range(1, parse_opencode(p).complete_count + 1)]


def load(version: str, scenario: str, after: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(cut export, the recorded request after batch N with a system text, the tool list and the nonce)."""
    fixture = FIXTURES / version / scenario
    trajectory = parse_opencode(fixture / "export.json")
    export = cut_export(Plan(trajectory, after, Mode.PREPARE_ONLY, "p"), None)
    main = [json.loads(line) for line in (fixture / "requests.jsonl").read_text().splitlines()]
    body = copy.deepcopy([entry for entry in main if entry.get("kind") == "main"][after]["body"])
    body["messages"] = [{"role": "system", "content": SYSTEM}, *body["messages"][1:],
                        {"role": "user", "content": NONCE}]
    body["tools"] = [{"type": "function", "function": {"name": name, "parameters": {}}} for name in body["tool_names"]]
    return export, body


def gate_for(export: dict[str, Any], version: str = "1.17.11", prompt: str | None = None,
             model: str = "scripted-model") -> ChatGate:
    return ChatGate(PROFILE, expected_prefix(export, NONCE, version, model), prompt)


@pytest.mark.parametrize(("version", "scenario", "after"), CASES, ids=lambda v: str(v))
def test_recorded_request_passes_and_is_cleaned_to_the_original(version: str, scenario: str, after: int) -> None:
    export, body = load(version, scenario, after)
    assert [project_request_message(m) for m in body["messages"][1:-1]] == session_messages(export)
    verdict = gate_for(export, version, model=body["model"]).first(body)  # apply_patch: a gpt- model id
    assert verdict.ok, verdict.reason
    assert verdict.body is not None and verdict.body["messages"] == body["messages"][:-1]
    assert verdict.facts["nonce_index"] == len(body["messages"]) - 1


def refusal(body: dict[str, Any], export: dict[str, Any], first: bool = True) -> str:
    gate = gate_for(export)
    verdict = gate.first(body) if first else gate.later(body)
    assert not verdict.ok and verdict.body is None
    return verdict.reason or ""


def test_a_changed_tool_result_is_refused_and_named() -> None:
    export, body = load("1.17.11", "parallel", 1)
    body["messages"][4]["content"] = "something else"
    assert "messages[4]" in refusal(body, export) and "call_" in refusal(body, export)


def test_reordered_parallel_results_are_refused() -> None:
    export, body = load("1.18.33", "parallel", 1)
    body["messages"][3], body["messages"][5] = body["messages"][5], body["messages"][3]
    assert "messages[3]" in refusal(body, export)


@pytest.mark.parametrize("mutate, reason", [
    (lambda b: b["messages"].append({"role": "assistant", "content": "x"}), "follows the resume nonce"),
    (lambda b: b["messages"].insert(-1, {"role": "user", "content": "hi"}), "not a tool result"),
    (lambda b: b["messages"].__setitem__(-1, {"role": "user", "content": f'"{NONCE} go"'}), "exact content"),
    (lambda b: b["messages"][1].__setitem__("content", NONCE), "occurs 2 times"),
    (lambda b: b["tools"].insert(4, {"type": "function", "function": {"name": "question"}}), "offered tools"),
    (lambda b: b.__setitem__("model", "other"), "model"),
    (lambda b: b["messages"].__setitem__(0, {"role": "user", "content": "x"}), "system message"),
    (lambda b: b["messages"].pop(2), "messages"),
])
def test_anything_else_is_refused(mutate: Any, reason: str) -> None:
    export, body = load("1.17.11", "bash_basic", 2)
    mutate(body)
    assert reason in refusal(body, export)


def test_later_request_keeps_the_continuation_and_refuses_the_step_limit_message() -> None:
    export, body = load("1.17.11", "errors", 1)
    live = [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_new", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}}]},
        {"role": "tool", "tool_call_id": "call_new", "content": "notes.txt\n"}]
    body["messages"] += live
    gate = gate_for(export)
    verdict = gate.later(body)
    assert verdict.ok and verdict.body is not None
    assert verdict.body["messages"][-2:] == live and all(m.get("content") != NONCE for m in verdict.body["messages"])
    body["messages"].append({"role": "assistant", "content": "CRITICAL - MAXIMUM STEPS REACHED\n\nstop"})
    assert "step-limit" in refusal(body, export, first=False)


def test_interrupted_tool_result_in_the_continuation_is_refused() -> None:
    export, body = load("1.17.11", "errors", 1)
    body["messages"] += [{"role": "assistant", "content": "", "tool_calls": [
        {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "[Tool execution was interrupted]"}]
    assert "interrupted" in refusal(body, export, first=False)


def test_system_prompt_is_compared_with_the_date_masked() -> None:
    export, body = load("1.18.33", "search", 1)
    other_day = SYSTEM.replace("Mon Nov 30 2026", "Tue Dec 01 2026")
    expected = expected_prefix(export, NONCE, "1.18.33", "scripted-model", masked_system_sha256(other_day))
    assert ChatGate(PROFILE, expected).first(body).ok
    body["messages"][0]["content"] = SYSTEM + "\nInjected instruction."
    verdict = ChatGate(PROFILE, expected).first(body)
    assert not verdict.ok and "system prompt" in (verdict.reason or "")


def test_system_prompt_must_not_change_between_requests() -> None:
    export, body = load("1.17.11", "files", 1)
    gate = gate_for(export)
    assert gate.first(body).ok
    body["messages"][0]["content"] = SYSTEM + " changed"
    verdict = gate.later(body)
    assert not verdict.ok and "changed since the first request" in (verdict.reason or "")


def test_boundary_prompt_takes_the_place_of_the_nonce() -> None:
    export, body = load("1.17.11", "files", 2)
    verdict = gate_for(export, prompt="Now check the file.").first(body)
    assert verdict.ok and verdict.body is not None
    assert verdict.body["messages"][-1] == {"role": "user", "content": "Now check the file."}
    refused = gate_for(export, prompt=f"say {NONCE}").first(body)
    assert not refused.ok and refused.reason == "the resume nonce remains in the cleaned request"


def test_title_requests_are_auxiliary_unless_they_carry_the_nonce() -> None:
    export, _ = load("1.17.11", "files", 1)
    gate = gate_for(export)
    title: dict[str, Any] = {"model": "scripted-model", "messages": [
        {"role": "system", "content": "You are a title generator."},
        {"role": "user", "content": "\"Edit the notes.\""}]}
    verdict = gate.auxiliary(title)
    assert verdict is not None and verdict.ok and verdict.body == title
    title["messages"][1]["content"] = NONCE
    verdict = gate.auxiliary(title)
    assert verdict is not None and not verdict.ok
    assert gate.auxiliary({"tools": [{"type": "function"}], "messages": []}) is None


def test_manifest_refuses_a_cut_inside_a_batch_and_a_bad_nonce() -> None:
    export, _ = load("1.17.11", "parallel", 1)
    broken = copy.deepcopy(export)
    last = broken["messages"][-1]["parts"]
    last[:] = [p for p in last if p.get("callID") != "call_seJ3GomEu4i5QpEgr6KAy9Ip" or p["type"] != "tool"] + [
        {**next(p for p in last if p.get("type") == "tool"), "id": "prt_zzz", "state": {"status": "running"}}]
    with pytest.raises(ReplayError, match="Tool execution was interrupted"):
        expected_prefix(broken, NONCE, "1.17.11", "m")
    with pytest.raises(ReplayError, match="without spaces"):
        expected_prefix(export, "__forkpoint nonce 123456789__", "1.17.11", "m")
    with pytest.raises(ReplayError, match="no verified resume envelope"):
        expected_prefix(export, NONCE, "1.16.0", "m")
    manifest = expected_prefix(export, NONCE, "1.17.11", "m")
    assert manifest.tools == BUILD_TOOLS and len(manifest.boundary_call_ids) == 3
    assert NONCE in json.dumps(manifest.to_json()) and "alpha" not in json.dumps(manifest.to_json())
    assert manifest.prefix_sha256 == canonical_sha256(session_messages(export))


def _as_1_2(body: dict[str, Any]) -> dict[str, Any]:
    """The request as OpenCode 1.2.6 sends it (measured by `forkpoint agents calibrate opencode@1.2.6`): its
    registry's tool order with `question`, the nonce followed by a newline."""
    sent = copy.deepcopy(body)
    sent["tools"] = [{"type": "function", "function": {"name": name, "parameters": {}}}
                     for name in ("question", "bash", "read", "glob", "grep", "edit", "write", "task", "webfetch",
                                  "todowrite", "skill")]
    sent["messages"][-1] = {"role": "user", "content": NONCE + "\n"}
    return sent


def test_a_1_2_sender_is_judged_by_the_1_2_envelope_and_only_it() -> None:
    from forkpoint.adapters.opencode.envelope import PROFILES, SENDER_1_2, sender_profile
    from forkpoint.adapters.opencode.gate import profile_for

    export, body = load("1.17.11", "parallel", 1)
    sent = _as_1_2(body)
    refused = gate_for(export).first(sent)  # the 1.17 envelope names the first difference: the tool list
    assert not refused.ok and refused.reason is not None and "'question'" in refused.reason
    expected = expected_prefix(export, NONCE, "1.17.11", "scripted-model", sender="1.2.6")
    assert expected.profile == SENDER_1_2.profile
    gate = ChatGate(profile_for(expected.profile), expected)
    verdict = gate.first(sent)
    assert verdict.ok, verdict.reason
    assert not ChatGate(profile_for(expected.profile), expected).first(_as_1_2(body) | {"tools": body["tools"]}).ok
    bare = _as_1_2(body)
    bare["messages"][-1]["content"] = NONCE  # without 1.2's newline: not its nonce message
    assert not ChatGate(profile_for(expected.profile), expected).first(bare).ok
    recorded = expected_prefix(export, NONCE, "1.17.11", "scripted-model").profile
    assert [sender_profile(v, PROFILES["1.17.11"]) for v in ("1.2.6", "1.1.9", "1.17.4", "2.0.0")] == [
        SENDER_1_2, SENDER_1_2, PROFILES["1.17.11"], PROFILES["1.17.11"]]
    assert expected_prefix(export, NONCE, "1.17.11", "scripted-model", sender="1.18.32").profile == recorded


def test_a_1_15_sender_sends_the_verified_form_and_is_judged_by_it() -> None:
    """Measured by the release sweep's older window: 1.15.3 and 1.15.4 offer the enabled tools sorted, without
    ``question`` (the 1.2 form's tool list refused both), as 1.17.11 does."""
    export, body = load("1.17.11", "parallel", 1)
    for sender in ("1.15.3", "1.15.4"):
        expected = expected_prefix(export, NONCE, "1.17.11", "scripted-model", sender=sender)
        verdict = ChatGate(profile_for(expected.profile), expected).first(copy.deepcopy(body))
        assert verdict.ok, verdict.reason
        refused = ChatGate(profile_for(expected.profile), expected).first(_as_1_2(body))
        assert not refused.ok and refused.reason is not None and "'question'" in refused.reason


def test_a_1_3_to_1_14_sender_offers_the_registry_order_without_question() -> None:
    """Measured by the release sweep's older window: 1.3.2 and 1.14.41 offer 1.2's registry order but no
    ``question`` (each was refused by the 1.2 form's tool list); 1.15 sorts them (above)."""
    from forkpoint.adapters.opencode.envelope import PROFILES, SENDER_1_3, sender_profile

    export, body = load("1.17.11", "parallel", 1)
    sent = _as_1_2(body)
    sent["tools"] = [tool for tool in sent["tools"] if tool["function"]["name"] != "question"]
    bare = copy.deepcopy(sent)
    bare["messages"][-1] = {"role": "user", "content": NONCE}  # the nonce message is 1.2's: NONCE + newline
    for sender in ("1.3.2", "1.14.41"):
        assert sender_profile(sender, PROFILES["1.17.11"]) == SENDER_1_3
        expected = expected_prefix(export, NONCE, "1.17.11", "scripted-model", sender=sender)
        verdict = ChatGate(profile_for(expected.profile), expected).first(copy.deepcopy(sent))
        assert verdict.ok, verdict.reason
        for other in (_as_1_2(body), body, bare):  # 1.2's list (with question), 1.17's (sorted), a bare nonce
            assert not ChatGate(profile_for(expected.profile), expected).first(copy.deepcopy(other)).ok
