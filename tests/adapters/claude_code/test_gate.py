"""Claude Code's bridge gate: envelope recognition and removal, the prefix proof, refusals that name the difference.

Synthetic bodies are built exactly like the real binaries build them (see the captures); the last section runs
the gate on the REAL first/later requests captured from Claude Code 2.1.220 and 2.1.332.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.claude_code.envelope import (
    ATTRIBUTION_REMINDER,
    CONTINUE_TEXT,
    NO_RESPONSE_TEXT,
    SENDER_2_1_268,
    ExpectedPrefix,
    api_messages_from_session,
    expected_prefix,
    profile_for_version,
    project,
    sender_profile,
)
from forkpoint.adapters.claude_code.gate import clean_first_request, clean_later_request
from forkpoint.bridge.gate import Verdict
from forkpoint.core.hashing import sha256_hex
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, text, thinking, tool_use

NONCE = "__forkpoint_nonce_00112233445566778899aabbccddeeff__"
VERSIONS = ("2.1.220", "2.1.332")
EPH = {"type": "ephemeral"}
REQUESTS = Path(__file__).parents[2] / "fixtures" / "claude_code" / "requests"
REAL_CASES = sorted(p for p in REQUESTS.glob("2.*/*") if (p / "first_request.json").is_file())

Body = dict[str, Any]


def session(version: str) -> ClaudeSessionBuilder:
    builder = ClaudeSessionBuilder(version=version)
    builder.user_prompt("Do the task.")
    builder.attachment("skill_listing")
    builder.assistant([text("one"), tool_use("toolu_a", "Bash", {"command": "echo a"})])
    builder.results({"toolu_a": "a\n"})
    builder.assistant([thinking("hmm"), text("two at once"), tool_use("toolu_b", "Bash", {"command": "echo b"}),
                       tool_use("toolu_c", "Bash", {"command": "echo c"})])
    builder.results({"toolu_b": "b\n", "toolu_c": "c\n"}, order=["toolu_c", "toolu_b"])
    return builder


def manifest(version: str) -> ExpectedPrefix:
    return expected_prefix(session(version).records, NONCE, version)


def resumed_body(version: str, *, trailing_system: int = 0, continuation: list[Body] | None = None) -> Body:
    """What Claude Code sends on resume: the replayed prefix (a system message at 1), then the envelope."""
    messages = copy.deepcopy(api_messages_from_session(session(version).records))
    messages[0]["content"].insert(0, {"type": "text", "text": "<system-reminder>\ndate\n</system-reminder>"})
    messages.insert(1, {"role": "system", "content": "Available agent types ...", "output_config": {"x": 1}})
    if version == "2.1.220":
        messages[-1]["content"].append({"type": "text", "text": CONTINUE_TEXT})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": NO_RESPONSE_TEXT}]})
    if trailing_system or continuation:
        messages.append({"role": "user", "content": NONCE})
        for index in range(trailing_system):
            messages.append({"role": "system", "content": [{"type": "text", "text": f"# Environment update {index}"}]})
    else:
        messages.append({"role": "user", "content": [{"type": "text", "text": NONCE, "cache_control": EPH}]})
    messages.extend(continuation or [])
    messages[-1]["content"][-1]["cache_control"] = EPH
    return {"model": "claude-x", "system": [{"type": "text", "text": "You are Claude Code."}], "messages": messages,
            "stream": True, "metadata": {"user_id": "u"}}


CONTINUATION = [
    {"role": "assistant", "content": [text("next"), tool_use("toolu_d", "Bash", {"command": "echo d"})]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_d", "content": "d\n",
                                  "is_error": False}]},
]


def refused(verdict: Verdict) -> str:
    assert not verdict.ok and verdict.body is None, verdict
    assert verdict.reason
    return verdict.reason


def boundary_index(version: str) -> int:
    return len(resumed_body(version)["messages"]) - 3


# -- accepted shapes -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_first_request_is_cleaned_to_the_boundary(version: str) -> None:
    body = resumed_body(version)
    before = copy.deepcopy(body)
    verdict = clean_first_request(manifest(version), body)
    assert verdict.ok and verdict.body is not None, verdict.reason
    assert body == before  # the input is never modified
    messages = verdict.body["messages"]
    assert len(messages) == len(body["messages"]) - 2
    last = messages[-1]
    assert last["role"] == "user" and [b["type"] for b in last["content"]] == ["tool_result", "tool_result"]
    assert last["content"][-1]["cache_control"] == EPH
    assert "cache_control" not in last["content"][0]
    assert verdict.body["system"] == body["system"] and verdict.body["metadata"] == body["metadata"]
    assert NONCE not in json.dumps(verdict.body)
    assert CONTINUE_TEXT not in json.dumps(verdict.body) and NO_RESPONSE_TEXT not in json.dumps(verdict.body)
    assert verdict.facts["continue_closure_removed"] is (version == "2.1.220")
    assert verdict.facts["system_after_nonce"] == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_trailing_system_messages_are_stripped_and_only_fingerprinted(version: str) -> None:
    verdict = clean_first_request(manifest(version), resumed_body(version, trailing_system=2))
    assert verdict.ok, verdict.reason
    assert verdict.body is not None and verdict.body["messages"][-1]["content"][-1]["tool_use_id"] == "toolu_b"
    assert verdict.facts["system_after_nonce"] == 2
    assert verdict.facts["system_after_nonce_sha256"] == [
        sha256_hex("# Environment update 0"), sha256_hex("# Environment update 1")]
    assert "Environment" not in json.dumps(verdict.facts)


@pytest.mark.parametrize("version", VERSIONS)
def test_boundary_prompt_replaces_the_nonce_in_the_first_request(version: str) -> None:
    prompt = "The previous tool results are complete. Please continue."
    verdict = clean_first_request(manifest(version), resumed_body(version, trailing_system=1), prompt)
    assert verdict.ok and verdict.body is not None, verdict.reason
    messages = verdict.body["messages"]
    assert messages[-1] == {"role": "user", "content": [{"type": "text", "text": prompt, "cache_control": EPH}]}
    assert [b["type"] for b in messages[-2]["content"]] == ["tool_result", "tool_result"]
    assert all("cache_control" not in b for b in messages[-2]["content"])
    assert len(project(messages)) == manifest(version).message_count + 1
    assert verdict.facts["boundary_prompt"] is True


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("prompt", [None, "Go on."])
def test_later_request_keeps_the_continuation(version: str, prompt: str | None) -> None:
    body = resumed_body(version, trailing_system=1, continuation=copy.deepcopy(CONTINUATION))
    verdict = clean_later_request(manifest(version), body, prompt)
    assert verdict.ok and verdict.body is not None, verdict.reason
    messages = verdict.body["messages"]
    assert messages[-2:] == body["messages"][-2:]
    count = manifest(version).message_count + 1  # + the system message at index 1
    expected_prompt = [{"role": "user", "content": prompt}] if prompt else []
    assert messages[count:-2] == expected_prompt  # the system run after the nonce is gone
    assert verdict.facts["continuation_messages"] == 2
    assert NONCE not in json.dumps(verdict.body)


def test_first_request_validator_refuses_a_continuation() -> None:
    body = resumed_body("2.1.332", continuation=copy.deepcopy(CONTINUATION))
    reason = refused(clean_first_request(manifest("2.1.332"), body))
    index = len(body["messages"]) - 2
    assert f"message {index} after the resume nonce has role 'assistant'" in reason


# -- every single-field mutation of the prefix is refused, naming the message ------------------------------------


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key != "cache_control":
                yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path, value


def _mutated(value: Any) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, str):
        return value + "X"
    if value is None:
        return "X"
    return value + 1


def _set(body: Body, path: tuple[Any, ...], value: Any) -> None:
    target: Any = body
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value


def _prefix_mutations(version: str) -> list[tuple[str, tuple[Any, ...]]]:
    body = resumed_body(version)
    mutations = []
    for index, message in enumerate(body["messages"][: boundary_index(version) + 1]):
        if message["role"] == "system":
            continue
        for path, value in _leaves(message, ("messages", index)):
            if isinstance(value, str) and value.startswith("<system-reminder>"):
                continue
            if path[-1] == "text" and value == CONTINUE_TEXT:
                continue
            mutations.append((version, path))
    return mutations


MUTATIONS = [m for version in VERSIONS for m in _prefix_mutations(version)]


@pytest.mark.parametrize("version,path", MUTATIONS, ids=["-".join(map(str, (v, *p[1:]))) for v, p in MUTATIONS])
def test_every_prefix_field_mutation_is_refused(version: str, path: tuple[Any, ...]) -> None:
    body = resumed_body(version)
    leaf: Any = body
    for key in path:
        leaf = leaf[key]
    _set(body, path, _mutated(leaf))
    reason = refused(clean_first_request(manifest(version), body))
    index = path[1]
    assert f"request messages[{index}])" in reason or f"message {index} (the boundary)" in reason, reason
    assert NONCE not in reason


@pytest.mark.parametrize("version", VERSIONS)
def test_changed_observation_names_the_tool_call(version: str) -> None:
    body = resumed_body(version)
    k = boundary_index(version)
    body["messages"][k]["content"][1]["content"] = "fresh but different\n"
    reason = refused(clean_first_request(manifest(version), body))
    assert reason == (f"conversation message 4 (request messages[{k}]) differs from the rebuilt session: "
                      "the observation of toolu_b (block 1) differs")
    body = resumed_body(version)
    body["messages"][3]["content"][0]["content"] = "stale\n"
    assert "request messages[3]" in refused(clean_first_request(manifest(version), body))


@pytest.mark.parametrize("version", VERSIONS)
def test_reordered_tool_results_are_refused(version: str) -> None:
    body = resumed_body(version)
    k = boundary_index(version)
    blocks = body["messages"][k]["content"]
    blocks[0], blocks[1] = blocks[1], blocks[0]
    reason = refused(clean_first_request(manifest(version), body))
    assert f"request messages[{k}]" in reason
    assert "different order: expected ['toolu_c', 'toolu_b'], got ['toolu_b', 'toolu_c']" in reason


def test_changed_role_tool_use_id_and_input() -> None:
    expected = manifest("2.1.332")
    body = resumed_body("2.1.332")
    body["messages"][2]["role"] = "user"
    assert "request messages[2]) differs from the rebuilt session: role is 'user', expected 'assistant'" in refused(
        clean_first_request(expected, body))
    body = resumed_body("2.1.332")
    body["messages"][4]["content"][2]["id"] = "toolu_zzz"
    assert "block 2 is tool_use toolu_zzz, expected tool_use toolu_b" in refused(clean_first_request(expected, body))
    body = resumed_body("2.1.332")
    body["messages"][4]["content"][3]["input"] = {"command": "rm -rf /"}
    assert ("request messages[4]) differs from the rebuilt session: tool_use toolu_c (block 3) differs in its name "
            "or input") in refused(clean_first_request(expected, body))
    body = resumed_body("2.1.332")
    body["messages"][4]["content"][0]["signature"] = "forged"
    assert "block 0 (thinking) differs" in refused(clean_first_request(expected, body))


@pytest.mark.parametrize("version", VERSIONS)
def test_extra_and_missing_messages_are_refused(version: str) -> None:
    expected = manifest(version)
    body = resumed_body(version)
    body["messages"].insert(2, {"role": "user", "content": [{"type": "text", "text": "sneaky"}]})
    reason = refused(clean_first_request(expected, body))
    assert "conversation message 1 (request messages[2]) differs from the rebuilt session: role is 'user'" in reason
    body = resumed_body(version)
    del body["messages"][2:4]  # the first assistant turn and its result
    reason = refused(clean_first_request(expected, body))
    assert "conversation message 1 (request messages[2])" in reason
    # a message missing at the end of the prefix / an extra one right before the boundary
    short = manifest(version)
    body = resumed_body(version)
    k = boundary_index(version)
    body["messages"][k - 1:k - 1] = [{"role": "assistant", "content": [text("extra")]},
                                      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "q",
                                                                    "content": "q"}]}]
    reason = refused(clean_first_request(short, body))
    assert "conversation message 3 (request messages[4]) differs from the rebuilt session: block 0 is text" in reason
    records = session(version).records
    fewer = expected_prefix(records[:5], NONCE, version)  # manifest of the prefix after batch 1
    reason = refused(clean_first_request(fewer, resumed_body(version)))
    assert "conversation message 3 (request messages[4]) is extra" in reason


def test_extra_message_after_the_prefix_hash_is_named() -> None:
    expected = manifest("2.1.332")
    shorter = ExpectedPrefix(**{**expected.__dict__, "message_count": 4,
                                "message_sha256": expected.message_sha256[:4],
                                "message_roles": expected.message_roles[:4],
                                "message_blocks": expected.message_blocks[:4]})
    assert "is extra" in refused(clean_first_request(shorter, resumed_body("2.1.332")))
    longer_body = resumed_body("2.1.332")
    del longer_body["messages"][4:6]
    reason = refused(clean_first_request(expected, longer_body))
    assert "request messages[4]" in reason or "is missing" in reason


# -- envelope refusals -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_nonce_must_occur_exactly_once(version: str) -> None:
    expected = manifest(version)
    body = resumed_body(version)
    body["system"].append({"type": "text", "text": f"echo {NONCE}"})
    assert refused(clean_first_request(expected, body)) == (
        "the resume nonce occurs 2 times in the request (expected exactly once)")
    body = resumed_body(version)
    body["metadata"] = {NONCE: "x"}
    assert "occurs 2 times" in refused(clean_first_request(expected, body))
    body = resumed_body(version)
    body["messages"][-1]["content"][0]["text"] = "something else"
    assert "occurs 0 times" in refused(clean_first_request(expected, body))


def test_nonce_in_a_key_only_or_not_sole_content() -> None:
    expected = manifest("2.1.332")
    body = resumed_body("2.1.332")
    body["messages"][-1] = {"role": "user", "content": [{"type": "text", "text": "hi", NONCE: 1}]}
    assert refused(clean_first_request(expected, body)) == "the resume nonce is not the sole content of a user message"
    body = resumed_body("2.1.332")
    body["messages"][-1]["content"].insert(0, {"type": "text", "text": "also"})
    assert "not the sole content" in refused(clean_first_request(expected, body))
    body = resumed_body("2.1.332")
    body["messages"][-1]["content"][0]["cache_control"] = {"type": "persistent"}
    assert "not the sole content" in refused(clean_first_request(expected, body))


@pytest.mark.parametrize("version", VERSIONS)
def test_malformed_closure_is_refused(version: str) -> None:
    expected = manifest(version)
    i = len(resumed_body(version)["messages"]) - 1
    body = resumed_body(version)
    body["messages"][i - 1]["content"][0]["text"] = "No response requested!"
    assert refused(clean_first_request(expected, body)) == (
        f"message {i - 1} before the resume nonce is not the exact assistant closure 'No response requested.'")
    body = resumed_body(version)
    body["messages"][i - 1]["content"][0]["cache_control"] = EPH
    assert f"message {i - 1} before the resume nonce" in refused(clean_first_request(expected, body))
    body = resumed_body(version)
    del body["messages"][i - 1]
    assert "before the resume nonce" in refused(clean_first_request(expected, body))


def test_version_specific_continue_block() -> None:
    body = resumed_body("2.1.220")
    k = boundary_index("2.1.220")
    body["messages"][k]["content"].pop()  # 2.1.220 without its closure text
    assert f"message {k} (the boundary) does not end with the exact 2.1.220 closure" in refused(
        clean_first_request(manifest("2.1.220"), body))
    body = resumed_body("2.1.220")
    body["messages"][k]["content"][-1]["text"] = "Continue."
    assert "does not end with the exact" in refused(clean_first_request(manifest("2.1.220"), body))
    body = resumed_body("2.1.332")
    body["messages"][k]["content"].append({"type": "text", "text": CONTINUE_TEXT})
    assert f"message {k} (the boundary) block 2 is 'text'" in refused(clean_first_request(manifest("2.1.332"), body))


@pytest.mark.parametrize("version", VERSIONS)
def test_unexpected_message_after_the_nonce(version: str) -> None:
    body = resumed_body(version, trailing_system=1)
    body["messages"].append({"role": "user", "content": [{"type": "text", "text": "more"}]})
    i = len(body["messages"]) - 3
    assert f"message {i + 2} after the resume nonce has role 'user'" in refused(
        clean_first_request(manifest(version), body))


def test_residue_is_refused() -> None:
    expected = manifest("2.1.332")
    continuation = [*copy.deepcopy(CONTINUATION), {"role": "assistant", "content": [text(NO_RESPONSE_TEXT)]},
                    {"role": "user", "content": [text("x")]}]
    body = resumed_body("2.1.332", continuation=continuation)
    assert "still holds the envelope text 'No response requested.'" in refused(
        clean_later_request(expected, body, None))
    reason = refused(clean_first_request(expected, resumed_body("2.1.332"), f"say {NONCE}"))
    assert reason == "the resume nonce remains in the cleaned request"


def test_bad_bodies_and_profiles() -> None:
    expected = manifest("2.1.332")
    assert refused(clean_first_request(expected, [])) == "the request body is not a JSON object"
    assert refused(clean_first_request(expected, {"messages": "x"})) == "the request has no list of message objects"
    other = ExpectedPrefix(**{**expected.__dict__, "profile": "claude-code/2.1.332/other"})
    assert "no verified resume envelope profile" in refused(clean_first_request(other, resumed_body("2.1.332")))
    assert "empty" in refused(clean_first_request(expected, resumed_body("2.1.332"), "  "))
    body = resumed_body("2.1.332")
    body["messages"] = body["messages"][-3:]
    assert "no complete envelope" in refused(clean_first_request(expected, body))


def test_later_request_prefix_mutation_is_refused() -> None:
    body = resumed_body("2.1.332", continuation=copy.deepcopy(CONTINUATION))
    body["messages"][3]["content"][0]["content"] = "changed"
    assert "request messages[3]" in refused(clean_later_request(manifest("2.1.332"), body, None))


# -- the REAL requests captured from the binaries ----------------------------------------------------------------


def _load(case: Path) -> tuple[ExpectedPrefix, Body, Body, Body]:
    meta = json.loads((case / "meta.json").read_text("utf-8"))
    records = [json.loads(line) for line in (case / "session.jsonl").read_text("utf-8").splitlines()]
    expected = expected_prefix(records, meta["nonce"], meta["version"])
    bodies = [json.loads((case / name).read_text("utf-8"))
              for name in ("first_request.json", "later_request.json", "original_request.json")]
    return expected, bodies[0], bodies[1], bodies[2]


def test_real_captures_cover_both_versions() -> None:
    assert {case.parent.name for case in REAL_CASES} >= set(VERSIONS)
    assert len(REAL_CASES) >= 8


@pytest.mark.parametrize("case", REAL_CASES, ids=lambda c: f"{c.parent.name}-{c.name}")
def test_real_first_request_is_accepted_and_equals_the_original(case: Path) -> None:
    expected, first, _, original = _load(case)
    verdict = clean_first_request(expected, first)
    assert verdict.ok and verdict.body is not None, verdict.reason
    cleaned = verdict.body["messages"]
    # what the model sees is what it saw in the recording right after batch N
    assert project(cleaned) == project(original["messages"])
    if original["messages"][-1]["role"] != "system":
        assert cleaned == original["messages"]  # byte for byte, cache marker included
    else:
        # 2.1.332 after `cd sub`: the recording had a trailing "# Environment update" system message that the
        # resume does not reproduce (its attachment line is written after the cut)
        boundary = original["messages"][-2]
        marked = {**boundary, "content": [*boundary["content"][:-1], {**boundary["content"][-1], "cache_control": EPH}]}
        assert cleaned == [*original["messages"][:-2], marked]
    with_prompt = clean_first_request(expected, first, "Please continue.")
    assert with_prompt.ok and with_prompt.body is not None
    assert with_prompt.body["messages"][-1]["content"][0]["text"] == "Please continue."


@pytest.mark.parametrize("case", REAL_CASES, ids=lambda c: f"{c.parent.name}-{c.name}")
def test_real_later_request_is_accepted(case: Path) -> None:
    expected, _, later, _ = _load(case)
    verdict = clean_later_request(expected, later, None)
    assert verdict.ok and verdict.body is not None, verdict.reason
    assert verdict.facts["continuation_messages"] == 2
    tail = project(verdict.body["messages"])[expected.message_count:]
    assert [m["role"] for m in tail] == ["assistant", "user"]
    assert re.search(r"toolu_\w+", json.dumps(tail))


@pytest.mark.parametrize("case", REAL_CASES, ids=lambda c: f"{c.parent.name}-{c.name}")
def test_real_first_request_with_a_changed_observation_is_refused(case: Path) -> None:
    expected, first, _, _ = _load(case)
    i = next(index for index, m in enumerate(first["messages"]) if m["content"] == expected.nonce or (
        isinstance(m["content"], list) and m["content"][0].get("text") == expected.nonce))
    k = i - 2
    first["messages"][k]["content"][0]["content"] += " (changed)"
    reason = refused(clean_first_request(expected, first))
    assert f"(request messages[{k}]) differs from the rebuilt session: the observation of" in reason


# -- 2.1.268-2.1.270's own resume form (REAL captures of 2.1.269: requests/releases/2.1.269/) -------------------

RELEASE_CASES = sorted(p for p in (REQUESTS / "releases").glob("2.*/*") if (p / "first_request.json").is_file())


def _load_release(case: Path, sender: str | None, read_as: str | None = None) -> tuple[ExpectedPrefix, Body, Body,
                                                                                          Body]:
    """A release capture's manifest as the verified version it calibrates as, resumed by ``sender``."""
    meta = json.loads((case / "meta.json").read_text("utf-8"))
    records = [json.loads(line) for line in (case / "session.jsonl").read_text("utf-8").splitlines()]
    expected = expected_prefix(records, meta["nonce"], read_as or meta["read_as"], sender=sender)
    bodies = [json.loads((case / name).read_text("utf-8"))
              for name in ("first_request.json", "later_request.json", "original_request.json")]
    return expected, bodies[0], bodies[1], bodies[2]


def test_release_captures_cover_the_measured_sender() -> None:
    assert {case.parent.name for case in RELEASE_CASES} == {"2.1.269"}
    assert len(RELEASE_CASES) == 4


@pytest.mark.parametrize("case", RELEASE_CASES, ids=lambda c: f"{c.parent.name}-{c.name}")
def test_release_first_and_later_requests_are_accepted_in_their_own_form(case: Path) -> None:
    """2.1.269 closes the boundary with 2.1.220's text AND puts the attribution reminder before the nonce: the
    gate of its own form accepts it and leaves exactly the conversation the recording sent after batch N."""
    expected, first, later, original = _load_release(case, case.parent.name)
    assert expected.profile == SENDER_2_1_268.profile and expected.version == "2.1.220"
    verdict = clean_first_request(expected, first)
    assert verdict.ok and verdict.body is not None, verdict.reason
    assert project(verdict.body["messages"]) == project(original["messages"])
    assert verdict.body["messages"][-1]["content"][-1]["cache_control"] == EPH
    # the reminder before the nonce went with it: only the recorded one, in front of the first prompt, is left
    assert json.dumps(verdict.body["messages"]).count(json.dumps(ATTRIBUTION_REMINDER)[1:-1]) == 1
    assert CONTINUE_TEXT not in json.dumps(verdict.body)
    later_verdict = clean_later_request(expected, later, None)
    assert later_verdict.ok and later_verdict.body is not None, later_verdict.reason
    tail = project(later_verdict.body["messages"])[expected.message_count:]
    assert [m["role"] for m in tail] == ["assistant", "user"]
    # the manifest names the form: it survives the trip through the run's state dir
    assert ExpectedPrefix.from_json(expected.to_json()) == expected


@pytest.mark.parametrize("case", RELEASE_CASES, ids=lambda c: f"{c.parent.name}-{c.name}")
@pytest.mark.parametrize(("sender", "read_as", "reason"), [
    (None, "2.1.220", "the resume nonce is not the sole content of a user message"),
    ("2.1.267", "2.1.220", "the resume nonce is not the sole content of a user message"),
    ("2.1.271", "2.1.220", "the resume nonce is not the sole content of a user message"),
    (None, "2.1.332", "is 'text'; only tool_result blocks may precede the envelope"),
])
def test_release_form_is_refused_as_any_other_senders(case: Path, sender: str | None, read_as: str,
                                                       reason: str) -> None:
    """What 2.1.269 sends is no verified version's form, nor that of the releases around it."""
    expected, first, _, _ = _load_release(case, sender, read_as)
    assert reason in refused(clean_first_request(expected, first))


@pytest.mark.parametrize("case", [c for c in REAL_CASES if c.name == "parallel_after_1"],
                         ids=lambda c: c.parent.name)
def test_release_form_refuses_the_verified_versions_requests(case: Path) -> None:
    """The 2.1.268 form is 2.1.220's closure plus at most the attribution reminder: 2.1.332's request (no closure)
    is refused; 2.1.220's (the same closure, no reminder) is what the form allows without the reminder."""
    meta = json.loads((case / "meta.json").read_text("utf-8"))
    records = [json.loads(line) for line in (case / "session.jsonl").read_text("utf-8").splitlines()]
    expected = expected_prefix(records, meta["nonce"], meta["version"], sender="2.1.269")
    first = json.loads((case / "first_request.json").read_text("utf-8"))
    verdict = clean_first_request(expected, first)
    if meta["version"] == "2.1.332":
        assert "does not end with the exact 2.1.268 closure text block" in refused(verdict)
    else:
        assert verdict.ok, verdict.reason


def test_release_form_allows_only_the_attribution_reminder_before_the_nonce() -> None:
    case = next(c for c in RELEASE_CASES if c.name == "parallel_after_1")
    expected, first, _, _ = _load_release(case, "2.1.270")
    i = next(index for index, m in enumerate(first["messages"]) if isinstance(m["content"], list)
             and m["content"][-1].get("text") == expected.nonce)
    attribution = first["messages"][i]["content"][0]
    assert attribution["text"].startswith(ATTRIBUTION_REMINDER)
    for blocks in ([{"type": "text", "text": "<system-reminder>\nsomething else\n</system-reminder>"}],
                   [attribution, attribution]):
        body = copy.deepcopy(first)
        body["messages"][i]["content"][:1] = copy.deepcopy(blocks)
        assert "the resume nonce is not the sole content of a user message" in refused(
            clean_first_request(expected, body))
    # a 2.1.332 manifest (any reminder allowed there) would have taken the foreign reminder: the form is narrower
    body = copy.deepcopy(first)
    del body["messages"][i]["content"][0]
    assert clean_first_request(expected, body).ok  # no reminder: a session whose attribution the resume keeps


def test_sender_profile_covers_exactly_2_1_268_to_2_1_270() -> None:
    verified = profile_for_version("2.1.220")
    for release in ("2.1.268", "2.1.269", "2.1.270", "2.1.269-beta.1"):
        assert sender_profile(release, verified) is SENDER_2_1_268
    for other in ("2.1.267", "2.1.271", "2.1.220", "2.1.332", "3.1.269", None, "x"):
        assert sender_profile(other, verified) is verified
    # a manifest naming the form over an unknown version, or an unknown form, is refused before anything else
    case = next(c for c in RELEASE_CASES if c.name == "parallel_after_1")
    expected, first, _, _ = _load_release(case, "2.1.269")
    for version, profile in (("2.1.269", expected.profile), ("2.1.220", "claude-code/2.1.269/other")):
        forged = dataclasses.replace(expected, version=version, profile=profile)
        assert "no verified resume envelope profile" in refused(clean_first_request(forged, first))
