"""The Codex resume manifest: the projection (rollout vs wire), the prefix checks, hashes only, JSON round-trip.

The real pairs come from tests/fixtures/codex/requests/ (scripts/record_codex_requests.py): the rollout cut
after batch N and the request the same binary sent right after batch N while recording.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from forkpoint.adapters.codex.envelope import (
    PROFILES,
    ROLLOUT_ONLY_KEYS,
    CodexExpectedPrefix,
    expected_prefix,
    output_digest,
    project,
)
from forkpoint.adapters.codex.parse import parse_rollout
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.hashing import canonical_sha256, make_nonce

REQUESTS = Path(__file__).parents[2] / "fixtures" / "codex" / "requests"
CASES = sorted(p for p in REQUESTS.glob("0.*/*") if (p / "first_request.json").is_file())
NONCE = "__forkpoint_nonce_0123456789abcdef0123456789abcdef__"

Item = dict[str, Any]


def rollout_items(case: Path) -> list[Item]:
    lines = [json.loads(line) for line in (case / "rollout.jsonl").read_text("utf-8").splitlines()]
    return [line["payload"] for line in lines if line["type"] == "response_item"]


def meta(case: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((case / "meta.json").read_text("utf-8"))
    return data


def original_input(case: Path) -> list[Item]:
    items: list[Item] = json.loads((case / "original_request.json").read_text("utf-8"))["input"]
    return items


def call(call_id: str, cmd: str = "ls") -> Item:
    return {"type": "function_call", "id": f"fc_{call_id}", "name": "exec_command",
            "arguments": json.dumps({"cmd": cmd}), "call_id": call_id,
            "internal_chat_message_metadata_passthrough": {"turn_id": "t"}}


def output(call_id: str, text: str = "out\n") -> Item:
    return {"type": "function_call_output", "id": f"fco_{call_id}", "call_id": call_id, "output": text,
            "internal_chat_message_metadata_passthrough": {"turn_id": "t", "create_time": 1.0}}


def message(role: str, text: str) -> Item:
    kind = "output_text" if role == "assistant" else "input_text"
    return {"type": "message", "id": f"msg_{role}_{len(text)}", "role": role,
            "content": [{"type": kind, "text": text}]}


def synthetic() -> list[Item]:
    return [message("developer", "<skills_instructions>x</skills_instructions>"), message("user", "Do it."),
            message("assistant", "one"), call("c1"), output("c1"),
            {"type": "reasoning", "id": "rs_1", "summary": [], "content": None, "encrypted_content": "e"},
            call("c2", "echo 2"), call("c3", "echo 3"), output("c2"), output("c3")]


def refused(items: list[Any], nonce: str = NONCE, version: str = "0.149.0") -> ReplayError:
    with pytest.raises(ReplayError) as info:
        expected_prefix(items, nonce, version)
    return info.value


# -- the projection on the REAL pairs ------------------------------------------------------------------------------


def test_real_cases_cover_both_versions() -> None:
    assert {case.parent.name for case in CASES} == set(PROFILES)
    assert len(CASES) >= 14


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.parent.name}-{c.name}")
def test_the_wire_is_the_rollout_minus_its_rollout_only_keys(case: Path) -> None:
    """What Codex sent after batch N while recording = the cut rollout's items, ids included."""
    items = rollout_items(case)
    wire = original_input(case)
    offset = 1 if PROFILES[meta(case)["version"]].instructions_item else 0
    assert project(wire[offset:]) == project(items)
    assert all(set(item) - set(sent) <= ROLLOUT_ONLY_KEYS for item, sent in zip(items, wire[offset:], strict=True))
    assert any(ROLLOUT_ONLY_KEYS & set(item) for item in items)  # the rollout does carry it
    assert all(isinstance(item.get("id"), str) for item in items)  # ids on both sides: kept by the projection
    if offset:  # 0.171: a base-instructions developer item the rollout does not hold
        assert wire[0]["role"] == "developer" and wire[0]["content"][0]["text"].startswith("You are Codex")
        assert all(item.get("id") != wire[0]["id"] for item in items)


def test_projection_keeps_everything_but_the_rollout_only_keys() -> None:
    item = {**output("c1"), "status": "completed", "extra": {"internal_chat_message_metadata_passthrough": 1}}
    assert project([item]) == [{key: value for key, value in item.items()
                                if key != "internal_chat_message_metadata_passthrough"}]
    assert project(["x", None]) == ["x", None]


def test_the_cut_rule_matches_the_parser() -> None:
    """The recorded cuts after 1 and 2 come from one recording: the parser's batch end gives the same bytes."""
    for version in PROFILES:
        after_1 = REQUESTS / version / "parallel_after_1" / "rollout.jsonl"
        after_2 = REQUESTS / version / "parallel_after_2" / "rollout.jsonl"
        parsed = parse_rollout(after_2)
        native = parsed.native
        lines = after_2.read_bytes().splitlines(keepends=True)
        assert b"".join(lines[: native.batch_end[0] + 1]) == after_1.read_bytes()
        assert native.batch_end[1] == len(lines) - 1


# -- the manifest ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c.parent.name}-{c.name}")
def test_manifest_of_a_real_cut_rollout(case: Path) -> None:
    items = rollout_items(case)
    info = meta(case)
    expected = expected_prefix(items, info["nonce"], info["version"])
    assert expected.item_count == len(items)
    assert expected.prefix_sha256 == canonical_sha256(project(items))
    assert [digest.sha256 for digest in expected.items] == [canonical_sha256(i) for i in project(items)]
    calls = [i["call_id"] for i in items if i["type"] in ("function_call", "custom_tool_call")]
    assert list(expected.call_ids) == calls
    assert [o.call_id for o in expected.outputs] == [i["call_id"] for i in items if i["type"].endswith("_output")]
    boundary = 2 if info["case"].startswith("parallel_after_2") else 1
    assert list(expected.boundary_call_ids) == calls[-boundary:]
    assert expected.profile == PROFILES[info["version"]].profile
    # hashes and ids only: no item text leaks into the manifest
    dumped = json.dumps(expected.to_json())
    for item in items:
        for part in item.get("content") or []:
            if isinstance(part, dict) and len(part.get("text", "")) > 12:
                assert part["text"] not in dumped
        if isinstance(item.get("output"), str):
            assert item["output"] not in dumped
    assert CodexExpectedPrefix.from_json(json.loads(dumped)) == expected


def test_output_digest_covers_call_id_and_output() -> None:
    expected = expected_prefix(synthetic(), NONCE, "0.149.0")
    assert expected.outputs[0].sha256 == output_digest({"call_id": "c1", "output": "out\n"})
    assert expected.outputs[0].sha256 != output_digest({"call_id": "c2", "output": "out\n"})
    assert [d.kind for d in expected.items] == ["message:developer", "message:user", "message:assistant",
                                                "function_call", "function_call_output", "reasoning",
                                                "function_call", "function_call", "function_call_output",
                                                "function_call_output"]
    assert [d.call_id for d in expected.items][3:5] == ["c1", "c1"]
    assert expected.boundary_call_ids == ("c2", "c3")


def test_from_json_refuses_anything_else() -> None:
    data = expected_prefix(synthetic(), NONCE, "0.171.0").to_json()
    bad: Any
    for bad in ([], {}, {**data, "schema_version": "other"}, {k: v for k, v in data.items() if k != "items"},
                {**data, "item_count": 3}, {**data, "items": [{"sha256": "x"}]}):
        with pytest.raises(ValueError):
            CodexExpectedPrefix.from_json(bad)


def test_make_nonce() -> None:
    first, second = make_nonce(), make_nonce()
    assert first != second and len(first) >= 40 and first.strip() == first
    expected_prefix(synthetic(), first, "0.149.0")


# -- refusals ----------------------------------------------------------------------------------------------------


def test_bad_nonces_and_versions() -> None:
    assert refused(synthetic(), nonce="short").kind is ErrorKind.CONFIGURATION
    assert refused(synthetic(), nonce=f"{NONCE} x").kind is ErrorKind.CONFIGURATION
    items = synthetic()
    items[1]["content"][0]["text"] = f"please say {NONCE}"
    assert "already occurs" in refused(items).message
    assert refused(synthetic(), version="0.150.0").kind is ErrorKind.UNSUPPORTED_VERSION


def test_prefix_must_end_with_the_outputs_of_the_last_response() -> None:
    assert "does not end with a tool output" in refused([*synthetic()[:5], message("assistant", "x")]).message
    assert "does not end with a tool output" in refused([]).message
    # the last outputs must answer exactly the calls of the response before them
    items = synthetic()
    del items[-1]  # c3 has no output
    error = refused(items)
    assert error.kind is ErrorKind.TRAJECTORY and "c3" in error.message and "without an output" in error.message
    items = synthetic()[:10]
    items.insert(4, call("c9"))  # a call of batch 1 answered only at the very end
    items.insert(len(items) - 1, output("c9"))
    assert "do not answer exactly the tool calls" in refused(items).message


def test_pairing_is_checked() -> None:
    items = synthetic()
    items[4]["call_id"] = "nobody"
    assert "answers no earlier matching call" in refused(items).message
    items = synthetic()
    items[4]["type"] = "custom_tool_call_output"
    assert "answers no earlier matching call" in refused(items).message
    items = synthetic()
    items.append(copy.deepcopy(items[-1]))
    assert "a second output for c3" in refused(items).message
    items = synthetic()
    items[6]["call_id"] = "c1"
    assert "duplicate call_id c1" in refused(items).message
    items = synthetic()
    del items[3]["call_id"]
    assert "has no call_id" in refused(items).message
    items = synthetic()
    items[2] = "not an item"  # type: ignore[call-overload]
    assert "is not an item object" in refused(items).message


def test_count_text() -> None:
    from forkpoint.core.hashing import count_text

    assert count_text({"a": [NONCE, {NONCE: 1}], "b": 3, "c": None}, NONCE) == 2
