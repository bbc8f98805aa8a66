"""The Codex bridge gate on the REAL resume requests of Codex 0.149.0 and 0.171.0.

Every body here was sent by the real binary (tests/fixtures/codex/requests/, scripts/record_codex_requests.py):
``first_request.json`` / ``later_request.json`` of ``codex exec resume <id> ... <NONCE>`` on a rollout cut after
batch N, and ``original_request.json``, what the same binary sent right after batch N while recording. The
mutations are applied to those real bodies.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.codex.envelope import PROFILES, CodexExpectedPrefix, expected_prefix, project
from forkpoint.adapters.codex.gate import CodexGate, clean_first_request, clean_later_request
from forkpoint.bridge.gate import Gate, Verdict

REQUESTS = Path(__file__).parents[2] / "fixtures" / "codex" / "requests"
CASES = sorted(p for p in REQUESTS.glob("0.*/*") if (p / "first_request.json").is_file())
VERSIONS = tuple(PROFILES)
PROMPT = "The previous tool results are complete. Please continue with the task from where you left off."

Body = dict[str, Any]


@dataclass
class Case:
    name: str
    version: str
    variant: str
    nonce: str
    expected: CodexExpectedPrefix
    first: Body
    later: Body
    original: Body

    @property
    def nonce_index(self) -> int:
        return len(self.first["input"]) - 1

    @property
    def boundary(self) -> int:
        """The input index of the last tool output (the end of the conversation in every request)."""
        items = self.first["input"]
        return max(i for i, item in enumerate(items) if item["type"].endswith("_output"))

    @property
    def offset(self) -> int:
        return 1 if PROFILES[self.version].instructions_item else 0


def load(path: Path) -> Case:
    meta = json.loads((path / "meta.json").read_text("utf-8"))
    lines = [json.loads(line) for line in (path / "rollout.jsonl").read_text("utf-8").splitlines()]
    items = [line["payload"] for line in lines if line["type"] == "response_item"]
    bodies = [json.loads((path / f"{name}_request.json").read_text("utf-8")) for name in ("first", "later", "original")]
    return Case(f"{meta['version']}/{meta['case']}", meta["version"], meta["variant"], meta["nonce"],
                expected_prefix(items, meta["nonce"], meta["version"]), *bodies)


def case_of(version: str, name: str) -> Case:
    return load(REQUESTS / version / name)


def refused(verdict: Verdict) -> str:
    assert not verdict.ok and verdict.body is None, verdict
    assert verdict.reason
    return verdict.reason


def ok(verdict: Verdict) -> Body:
    assert verdict.ok and verdict.body is not None, verdict.reason
    return verdict.body


# -- the real requests are accepted and cleaned to exactly what the model saw ----------------------------------------


def test_real_captures_cover_both_versions_and_every_variant() -> None:
    loaded = [load(path) for path in CASES]
    assert {case.version for case in loaded} == set(VERSIONS)
    for version in VERSIONS:
        variants = {case.variant for case in loaded if case.version == version}
        assert variants == {"nonce", "samehome", "othercwd", "openai_provider"}


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}-{p.name}")
def test_real_first_request_is_cleaned_to_the_original(path: Path) -> None:
    case = load(path)
    before = copy.deepcopy(case.first)
    verdict = clean_first_request(case.expected, case.first)
    cleaned = ok(verdict)
    assert case.first == before  # the input is never modified
    if case.variant == "openai_provider":
        # the built-in provider also sends the rollout-only metadata; the recording (custom provider) did not
        assert project(cleaned["input"]) == project(case.original["input"])
        assert {k: v for k, v in cleaned.items() if k != "input"} == {
            k: v for k, v in case.original.items() if k != "input"}
    else:
        assert cleaned == case.original  # byte for byte: what the model saw right after batch N
    assert cleaned["input"][-1]["type"] in ("function_call_output", "custom_tool_call_output")
    assert case.nonce not in json.dumps(cleaned)
    envelope = {"nonce": ["skills_instructions"], "openai_provider": ["skills_instructions"], "samehome": [],
                "othercwd": ["skills_instructions", "environment_context"]}[case.variant]
    assert verdict.facts["envelope_items"] == envelope
    assert verdict.facts["nonce_index"] == case.nonce_index
    assert ("instructions_item_sha256" in verdict.facts) is PROFILES[case.version].instructions_item
    # facts are hashes and kinds only
    dumped = json.dumps(verdict.facts)
    assert case.nonce not in dumped and "skills" not in dumped.replace("skills_instructions", "")
    assert "/tmp/" not in dumped


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}-{p.name}")
def test_real_first_request_with_a_boundary_prompt(path: Path) -> None:
    case = load(path)
    verdict = clean_first_request(case.expected, case.first, PROMPT)
    cleaned = ok(verdict)
    nonce_item = case.first["input"][-1]
    assert cleaned["input"][:-1] == case.first["input"][: case.boundary + 1]
    assert cleaned["input"][-1] == {**nonce_item, "content": [{"type": "input_text", "text": PROMPT}]}
    assert verdict.facts["boundary_prompt"] is True


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}-{p.name}")
@pytest.mark.parametrize("prompt", [None, PROMPT])
def test_real_later_request_keeps_the_continuation(path: Path, prompt: str | None) -> None:
    case = load(path)
    assert case.later["input"][: len(case.first["input"])] == case.first["input"]  # the envelope stays in the middle
    verdict = clean_later_request(case.expected, case.later, prompt)
    cleaned = ok(verdict)
    continuation = case.later["input"][len(case.first["input"]):]
    assert [item["type"] for item in continuation] == ["message", "function_call", "function_call_output"]
    head = case.first["input"][: case.boundary + 1]
    tail = [{**case.first["input"][-1], "content": [{"type": "input_text", "text": prompt}]}] if prompt else []
    assert cleaned["input"] == [*head, *tail, *continuation]
    assert verdict.facts["continuation_items"] == 3
    assert case.nonce not in json.dumps(cleaned)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_first_request_validator_refuses_a_later_request(version: str) -> None:
    case = case_of(version, "parallel_after_1")
    reason = refused(clean_first_request(case.expected, case.later))
    assert reason == (f"input item {case.nonce_index + 1} (message:assistant) follows the resume nonce; the first "
                      "request must end with it")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_gate_object(version: str) -> None:
    case = case_of(version, "parallel_after_2")
    gate: Gate = CodexGate(case.expected)
    assert gate.name == "openai-responses" and gate.model_routes == frozenset({"/v1/responses", "/responses"})
    assert ok(gate.first(case.first)) == case.original
    assert ok(gate.later(case.later))["input"][-1]["type"] == "function_call_output"
    prompted = CodexGate(case.expected, PROMPT)
    assert ok(prompted.first(case.first))["input"][-1]["content"][0]["text"] == PROMPT


# -- mutations of the real bodies are refused, naming the input index -----------------------------------------------

MUTATION_CASES = [(version, name) for version in VERSIONS
                  for name in ("parallel_after_2", "apply_patch_after_1", "reasoning_after_2")]
IDS = [f"{v}-{n}" for v, n in MUTATION_CASES]


def _outputs(case: Case) -> list[int]:
    return [i for i, item in enumerate(case.first["input"]) if item["type"].endswith("_output")]


def _calls(case: Case) -> list[int]:
    return [i for i, item in enumerate(case.first["input"]) if item["type"] in ("function_call", "custom_tool_call")]


@pytest.mark.parametrize("version,name", MUTATION_CASES, ids=IDS)
def test_changed_output_names_the_index_and_call(version: str, name: str) -> None:
    for index in _outputs(case_of(version, name)):
        case = case_of(version, name)
        item = case.first["input"][index]
        item["output"] = item["output"] + " (changed)" if isinstance(item["output"], str) else "changed"
        reason = refused(clean_first_request(case.expected, case.first))
        assert reason == (f"input item {index} (rollout item {index - case.offset}) differs from the rebuilt "
                          f"rollout: the output of {item['call_id']} differs")
        later = case_of(version, name).later
        later["input"][index]["output"] = "changed"
        assert f"input item {index} (rollout item" in refused(clean_later_request(case.expected, later))


@pytest.mark.parametrize("version", VERSIONS)
def test_reordered_outputs_are_refused(version: str) -> None:
    case = case_of(version, "parallel_after_2")
    items = case.first["input"]
    k = case.boundary
    want = [items[k - 1]["call_id"], items[k]["call_id"]]
    items[k - 1], items[k] = items[k], items[k - 1]
    reason = refused(clean_first_request(case.expected, case.first))
    assert reason == (f"input item {k - 1} (rollout item {k - 1 - case.offset}) differs from the rebuilt rollout: "
                      f"the tool outputs are in a different order: expected {want}, got {want[::-1]}")


@pytest.mark.parametrize("version,name", MUTATION_CASES, ids=IDS)
def test_changed_call_id_arguments_and_item_ids(version: str, name: str) -> None:
    index = _calls(case_of(version, name))[-1]
    case = case_of(version, name)
    call = case.first["input"][index]
    old = call["call_id"]
    call["call_id"] = "call_forged"
    assert refused(clean_first_request(case.expected, case.first)).endswith(
        f"it is call call_forged, expected call {old}")
    case = case_of(version, name)
    call = case.first["input"][index]
    key = "input" if call["type"] == "custom_tool_call" else "arguments"
    call[key] = call[key].replace('"cmd": "', '"cmd": "rm -rf / ; ') if key == "arguments" else call[key] + "\n"
    assert refused(clean_first_request(case.expected, case.first)) == (
        f"input item {index} (rollout item {index - case.offset}) differs from the rebuilt rollout: call "
        f"{old} differs in its name, arguments/input or id")
    case = case_of(version, name)
    last = case.boundary
    case.first["input"][last]["id"] = "fco_forged"
    assert refused(clean_first_request(case.expected, case.first)).endswith("differs outside its output (e.g. its id)")
    case = case_of(version, name)
    case.first["input"][case.offset + 2]["id"] = "msg_forged"  # the task prompt
    assert refused(clean_first_request(case.expected, case.first)) == (
        f"input item {case.offset + 2} (rollout item 2) differs from the rebuilt rollout: the message:user item "
        "differs (content or id)")


@pytest.mark.parametrize("version", VERSIONS)
def test_reasoning_is_compared(version: str) -> None:
    case = case_of(version, "reasoning_after_2")
    index = next(i for i, item in enumerate(case.first["input"]) if item["type"] == "reasoning")
    case.first["input"][index]["encrypted_content"] = "forged"
    assert refused(clean_first_request(case.expected, case.first)).endswith(
        "the reasoning item differs (summary, encrypted content or id)")


@pytest.mark.parametrize("version,name", MUTATION_CASES, ids=IDS)
def test_extra_and_missing_items(version: str, name: str) -> None:
    # an extra assistant message right after the task prompt
    case = case_of(version, name)
    at = case.offset + 3
    case.first["input"].insert(at, {"type": "message", "id": "msg_x", "role": "assistant",
                                    "content": [{"type": "output_text", "text": "sneaky"}]})
    reason = refused(clean_first_request(case.expected, case.first))
    assert reason.startswith(f"input item {at} (rollout item 3) differs from the rebuilt rollout: ")
    assert "message:assistant" in reason
    # a missing item in the middle (the <environment_context> item: the task prompt moves up)
    case = case_of(version, name)
    del case.first["input"][case.offset + 1]
    assert refused(clean_first_request(case.expected, case.first)) == (
        f"input item {case.offset + 1} (rollout item 1) differs from the rebuilt rollout: the message:user item "
        "differs (content or id)")
    # an extra output at the end of the conversation
    case = case_of(version, name)
    extra = {**case.first["input"][case.boundary], "id": "fco_extra"}
    case.first["input"].insert(case.boundary + 1, extra)
    count = case.expected.item_count
    assert refused(clean_first_request(case.expected, case.first)).startswith(
        f"input item {case.offset + count} ({extra['type']} for {extra['call_id']}) is extra: the request has "
        f"{count + 1} items before the envelope, the rebuilt rollout {count}")
    # the last output missing
    case = case_of(version, name)
    b = case.boundary
    gone = case.first["input"].pop(b)
    reason = refused(clean_first_request(case.expected, case.first))
    if case.first["input"][b - 1]["type"].endswith("_output"):  # a parallel batch: one output left
        assert reason == (f"rollout item {b - case.offset} ({gone['type']} for {gone['call_id']}) is missing at "
                          f"input item {b}: the request has {b - case.offset} items before the envelope, the "
                          f"rebuilt rollout {b - case.offset + 1}")
    else:  # the call itself now precedes the envelope
        kind = case.first["input"][b - 1]["type"]
        assert reason == (f"input item {b - 1} ({kind}) between the last tool output and the resume nonce is not "
                          "a known resume context item")


@pytest.mark.parametrize("version", VERSIONS)
def test_a_manifest_of_fewer_items_refuses_the_longer_request(version: str) -> None:
    after_1 = case_of(version, "parallel_after_1")
    after_2 = case_of(version, "parallel_after_2")
    # same recording: the after-2 request starts with the after-1 conversation, then has 5 more items
    reason = refused(clean_first_request(after_1.expected, after_2.first))
    count = after_1.expected.item_count
    assert reason.startswith(f"input item {after_1.offset + count} (message:assistant) is extra")
    reason = refused(clean_first_request(after_2.expected, after_1.first))
    assert f"(rollout item {count}) differs from the rebuilt rollout" in reason or "is missing" in reason


# -- every single-field mutation of the conversation is refused and names its index --------------------------------


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[tuple[Any, ...], Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
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


LEAF_CASES = [(version, "parallel_after_2") for version in VERSIONS] + [(version, "reasoning_after_2")
                                                                       for version in VERSIONS]


def _leaf_mutations() -> list[tuple[str, str, tuple[Any, ...]]]:
    out = []
    for version, name in LEAF_CASES:
        case = case_of(version, name)
        for index in range(case.offset, case.boundary + 1):
            for path, _ in _leaves(case.first["input"][index], (index,)):
                out.append((version, name, path))
    return out


LEAVES = _leaf_mutations()


@pytest.mark.parametrize("version,name,path", LEAVES, ids=["-".join(map(str, (v, n, *p))) for v, n, p in LEAVES])
def test_every_conversation_field_mutation_is_refused(version: str, name: str, path: tuple[Any, ...]) -> None:
    case = case_of(version, name)
    target: Any = case.first["input"]
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = _mutated(target[path[-1]])
    reason = refused(clean_first_request(case.expected, case.first))
    assert f"input item {path[0]} " in reason, reason
    assert case.nonce not in reason


# -- envelope refusals -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_nonce_must_occur_exactly_once(version: str) -> None:
    case = case_of(version, "parallel_after_1")
    case.first["input"][case.offset + 2]["content"][0]["text"] += f" {case.nonce}"
    assert refused(clean_first_request(case.expected, case.first)) == (
        "the resume nonce occurs 2 times in the request (expected exactly once)")
    case = case_of(version, "parallel_after_1")
    case.first["prompt_cache_key"] = case.nonce
    assert "occurs 2 times" in refused(clean_first_request(case.expected, case.first))
    case = case_of(version, "parallel_after_1")
    case.first["input"].append(copy.deepcopy(case.first["input"][-1]))
    assert "occurs 2 times" in refused(clean_first_request(case.expected, case.first))
    case = case_of(version, "parallel_after_1")
    case.first["input"][-1]["content"][0]["text"] = "something else"
    assert "occurs 0 times" in refused(clean_first_request(case.expected, case.first))


@pytest.mark.parametrize("version", VERSIONS)
def test_nonce_must_be_the_sole_input_text_of_a_user_item(version: str) -> None:
    mutations: list[Callable[[Body], Any]] = [
        lambda item: item["content"].insert(0, {"type": "input_text", "text": "also"}),
        lambda item: item.update(role="developer"),
        lambda item: item["content"][0].update(type="output_text"),
        lambda item: item["content"][0].update(cache="x"),
        lambda item: item.update(status="completed"),
        lambda item: item.update(type="function_call_output"),
    ]
    for mutate in mutations:
        case = case_of(version, "parallel_after_1")
        mutate(case.first["input"][-1])
        assert refused(clean_first_request(case.expected, case.first)) == (
            "the resume nonce is not the sole input_text of a user message item")


@pytest.mark.parametrize("version", VERSIONS)
def test_unknown_items_between_the_output_and_the_nonce(version: str) -> None:
    for item in (
        {"type": "message", "id": "msg_a", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]},
        {"type": "message", "id": "msg_t", "role": "user",
         "content": [{"type": "input_text", "text": "<turn_aborted>"}]},
        {"type": "message", "id": "msg_d", "role": "developer",
         "content": [{"type": "input_text", "text": "<skills_instructions>x"}, {"type": "input_text", "text": "y"}]},
        {"type": "message", "id": "msg_e", "role": "developer",
         "content": [{"type": "input_text", "text": "<environment_context>x"}]},  # right prefix, wrong role
        {"type": "message", "id": "msg_s", "role": "developer", "status": "completed",
         "content": [{"type": "input_text", "text": "<skills_instructions>x"}]},
        {"type": "function_call", "id": "fc_x", "name": "exec_command", "arguments": "{}", "call_id": "call_x"},
    ):
        case = case_of(version, "parallel_after_1")
        at = len(case.first["input"]) - 1
        case.first["input"].insert(at, item)
        kind = item["type"] if item["type"] != "message" else f"message:{item['role']}"
        assert refused(clean_first_request(case.expected, case.first)) == (
            f"input item {at} ({kind}) between the last tool output and the resume nonce is not a known resume "
            "context item")


@pytest.mark.parametrize("version", VERSIONS)
def test_known_context_items_are_stripped(version: str) -> None:
    case = case_of(version, "parallel_after_1_samehome")
    at = len(case.first["input"]) - 1
    known = [
        {"type": "message", "id": "msg_1", "role": "developer",
         "content": [{"type": "input_text", "text": "<skills_instructions>\n## Skills update\n..."},
                     {"type": "input_text", "text": "<permissions instructions>\n..."}]},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "## Skills update\n."}]},
        {"type": "message", "id": "msg_3", "role": "user",
         "content": [{"type": "input_text", "text": "<environment_context>\n  <cwd>/x</cwd>"}],
         "internal_chat_message_metadata_passthrough": {"turn_id": "t"}},
    ]
    case.first["input"][at:at] = known
    verdict = clean_first_request(case.expected, case.first)
    assert ok(verdict) == case.original
    assert verdict.facts["envelope_items"] == ["skills_instructions+permissions_instructions", "skills_update",
                                               "environment_context"]


@pytest.mark.parametrize("version", VERSIONS)
def test_no_output_before_the_nonce(version: str) -> None:
    case = case_of(version, "parallel_after_1_samehome")
    case.first["input"] = [case.first["input"][-1]]
    assert refused(clean_first_request(case.expected, case.first)) == "no tool output precedes the resume nonce"


def test_the_0171_instructions_item_is_required() -> None:
    case = case_of("0.171.0", "parallel_after_1")
    reason = "input item 0 is not the base-instructions developer message Codex 0.171.0 sends first"
    del case.first["input"][0]
    assert refused(clean_first_request(case.expected, case.first)) == reason
    case = case_of("0.171.0", "parallel_after_1")
    case.first["input"][0]["role"] = "user"
    assert refused(clean_first_request(case.expected, case.first)) == reason
    case = case_of("0.171.0", "parallel_after_1")
    case.first["input"][0]["content"].append({"type": "input_text", "text": "more"})
    assert refused(clean_first_request(case.expected, case.first)) == reason
    # 0.149 has no such item: an extra developer item there is an extra conversation item
    case = case_of("0.149.0", "parallel_after_1")
    case.first["input"].insert(0, case_of("0.171.0", "parallel_after_1").first["input"][0])
    assert refused(clean_first_request(case.expected, case.first)).startswith(
        "input item 0 (rollout item 0) differs from the rebuilt rollout")


@pytest.mark.parametrize("version", VERSIONS)
def test_server_side_history_is_refused(version: str) -> None:
    for field in ("previous_response_id", "conversation"):
        case = case_of(version, "parallel_after_1")
        case.first[field] = "resp_123"
        assert refused(clean_first_request(case.expected, case.first)) == (
            f"the request sets {field!r}: the upstream would add history the gate cannot check")
    case = case_of(version, "parallel_after_1")
    case.first["previous_response_id"] = None
    ok(clean_first_request(case.expected, case.first))


def test_residue_and_bad_bodies() -> None:
    case = case_of("0.149.0", "parallel_after_1")
    assert refused(clean_first_request(case.expected, case.first, f"say {case.nonce}")) == (
        "the resume nonce remains in the cleaned request")
    assert refused(clean_first_request(case.expected, case.first, "  ")) == "the configured boundary prompt is empty"
    assert refused(clean_first_request(case.expected, [])) == "the request body is not a JSON object"
    for bad in ({"input": "hi"}, {"input": [1]}, {}):
        assert refused(clean_first_request(case.expected, bad)) == "the request has no input list of item objects"
    other = CodexExpectedPrefix(**{**case.expected.__dict__, "profile": "codex/0.149.0/other"})
    assert "no verified resume envelope profile" in refused(clean_first_request(other, case.first))
    unknown = CodexExpectedPrefix(**{**case.expected.__dict__, "version": "0.150.0"})
    assert "no verified resume envelope profile" in refused(clean_first_request(unknown, case.first))


def test_a_manifest_for_the_other_version_refuses() -> None:
    case_149 = case_of("0.149.0", "parallel_after_1")
    case_171 = case_of("0.171.0", "parallel_after_1")
    assert not clean_first_request(case_171.expected, case_149.first).ok
    assert not clean_first_request(case_149.expected, case_171.first).ok


def test_manifest_round_trip_still_validates() -> None:
    case = case_of("0.171.0", "reasoning_after_2")
    restored = CodexExpectedPrefix.from_json(json.loads(json.dumps(case.expected.to_json())))
    assert ok(clean_first_request(restored, case.first)) == case.original
