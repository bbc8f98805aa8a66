"""envelope.py: the messages Claude Code sends for a session prefix, the projection, and the manifest."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from forkpoint.adapters import agent_spec
from forkpoint.adapters.claude_code.envelope import (
    ExpectedPrefix,
    api_messages_from_session,
    expected_prefix,
    observation_digest,
    project,
)
from forkpoint.adapters.claude_code.parse import ClaudeNative, parse_session
from forkpoint.adapters.claude_code.session import line_bytes, prefix_records
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.hashing import canonical_sha256, make_nonce
from forkpoint.testing.claude_sessions import ClaudeSessionBuilder, simple_session, text, thinking, tool_use

FIXTURES = Path(__file__).parents[2] / "fixtures" / "claude_code"
NONCE = "__forkpoint_nonce_00112233445566778899aabbccddeeff__"
VERSIONS = ("2.1.220", "2.1.332")


def parallel_session(version: str = "2.1.332") -> ClaudeSessionBuilder:
    builder = ClaudeSessionBuilder(version=version)
    builder.user_prompt("Do the task.")
    builder.attachment("skill_listing")
    builder.assistant([text("one"), tool_use("toolu_a", "Bash", {"command": "echo a"})])
    builder.results({"toolu_a": "a\n"})
    builder.assistant([thinking("hmm"), text("two at once"), tool_use("toolu_b", "Bash", {"command": "echo b"}),
                       tool_use("toolu_c", "Read", {"file_path": "/x"})])
    builder.results({"toolu_b": "b\n", "toolu_c": [text("1\tx")]}, order=["toolu_c", "toolu_b"],
                    errors=frozenset({"toolu_b"}))
    return builder


# -- api_messages_from_session ---------------------------------------------------------------------------------


def test_messages_merge_assistant_lines_and_results_in_file_order() -> None:
    messages = api_messages_from_session(parallel_session().records)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[0]["content"] == [{"type": "text", "text": "Do the task."}]
    assert [b["type"] for b in messages[3]["content"]] == ["thinking", "text", "tool_use", "tool_use"]
    # completion order (file order), not call order
    assert [b["tool_use_id"] for b in messages[4]["content"]] == ["toolu_c", "toolu_b"]
    assert messages[4]["content"][1]["is_error"] is True


def test_messages_skip_attachments_sidechains_and_bookkeeping() -> None:
    builder = simple_session(1)
    builder.records.insert(1, {"type": "attachment", "uuid": "att", "parentUuid": "user-1",
                               "attachment": {"type": "date"}})
    builder.records.insert(2, {"type": "queue-operation", "operation": "enqueue", "content": "x"})
    builder.records.append({"type": "assistant", "uuid": "side", "isSidechain": True,
                            "message": {"id": "msg_side", "role": "assistant", "content": [text("side")]}})
    messages = api_messages_from_session(builder.records)
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant"]
    assert all(b.get("text") != "side" for m in messages for b in m["content"])


def test_interleaved_result_lines_keep_the_assistant_message_whole() -> None:
    def line(kind: str, content: list[dict[str, Any]], message_id: str | None = None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": kind, "content": content}
        if message_id:
            message["id"] = message_id
        return {"type": kind, "uuid": f"u{len(content)}{message_id}", "message": message}

    records = [
        {"type": "user", "uuid": "p", "message": {"role": "user", "content": "go"}},
        line("assistant", [tool_use("t1", "Bash", {"command": "a"})], "m1"),
        line("user", [{"type": "tool_result", "tool_use_id": "t1", "content": "a"}]),
        line("assistant", [tool_use("t2", "Bash", {"command": "b"})], "m1"),
        line("user", [{"type": "tool_result", "tool_use_id": "t2", "content": "b"}]),
    ]
    messages = api_messages_from_session(records)
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert [b["id"] for b in messages[1]["content"]] == ["t1", "t2"]
    assert [b["tool_use_id"] for b in messages[2]["content"]] == ["t1", "t2"]


# -- project ---------------------------------------------------------------------------------------------------


def test_projection_rules() -> None:
    eph = {"type": "ephemeral"}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>\ndate</system-reminder>"},
                                     {"type": "text", "text": "task", "cache_control": eph}]},
        {"role": "system", "content": "skills", "output_config": {"effort": "medium"}},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s", "extra": 1},
            {"type": "redacted_thinking", "data": "d"},
            {"type": "tool_use", "id": "x", "name": "Bash", "input": {"command": "ls"}, "caller": "direct"},
            {"type": "server_tool_use", "id": "s1", "cache_control": eph},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "x",
             "content": [{"type": "text", "text": "o", "cache_control": eph}]},
            {"type": "image", "source": {"type": "base64", "data": "AA=="}, "cache_control": eph},
        ]},
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>only</system-reminder>"}]},
        {"role": "user", "content": "plain"},
    ]
    assert project(messages) == [
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "t", "signature": "s"},
            {"type": "redacted_thinking", "data": "d"},
            {"type": "tool_use", "id": "x", "name": "Bash", "input": {"command": "ls"}},
            {"type": "server_tool_use", "id": "s1"},  # unknown types are kept (minus cache_control)
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "x", "content": [{"type": "text", "text": "o"}], "is_error": False},
            {"type": "image", "source": {"type": "base64", "data": "AA=="}},
        ]},
        {"role": "user", "content": [{"type": "text", "text": "plain"}]},
    ]


def test_projection_keeps_string_tool_content_and_error_flag() -> None:
    block = {"type": "tool_result", "tool_use_id": "x", "content": "<system-reminder>kept</system-reminder>",
             "is_error": True}
    assert project([{"role": "user", "content": [block]}])[0]["content"][0] == block


# -- expected_prefix -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
def test_expected_prefix_fields(version: str) -> None:
    records = parallel_session(version).records
    expected = expected_prefix(records, NONCE, version)
    projected = project(api_messages_from_session(records))
    assert expected.profile == f"claude-code/{version}/native-resume-v1"
    assert expected.version == version and expected.nonce == NONCE
    assert expected.message_count == 5
    assert expected.prefix_sha256 == canonical_sha256(projected)
    assert list(expected.message_sha256) == [canonical_sha256(m) for m in projected]
    assert expected.tool_use_ids == ("toolu_a", "toolu_b", "toolu_c")
    assert expected.boundary_tool_use_ids == ("toolu_c", "toolu_b")
    assert expected.observation_sha256[2] == canonical_sha256(
        {"tool_use_id": "toolu_b", "content": "b\n", "is_error": True})
    assert len(expected.observation_sha256) == 3
    assert expected.message_roles == ("user", "assistant", "user", "assistant", "user")
    assert [b.type for b in expected.message_blocks[3]] == ["thinking", "text", "tool_use", "tool_use"]


def test_expected_prefix_json_round_trip_holds_no_bodies() -> None:
    expected = expected_prefix(parallel_session().records, NONCE, "2.1.332")
    encoded = orjson.dumps(expected.to_json())
    assert ExpectedPrefix.from_json(json.loads(encoded)) == expected
    for secret in (b"Do the task.", b"echo a", b"two at once", b"hmm"):
        assert secret not in encoded
    with pytest.raises(ValueError):
        ExpectedPrefix.from_json({"schema_version": "other"})
    broken = json.loads(encoded)
    broken["message_count"] = 4
    with pytest.raises(ValueError):
        ExpectedPrefix.from_json(broken)


def test_expected_prefix_refusals() -> None:
    records = parallel_session().records
    with pytest.raises(ReplayError) as info:
        expected_prefix(records, NONCE, "2.1.999")
    assert info.value.kind is ErrorKind.UNSUPPORTED_VERSION
    with pytest.raises(ReplayError) as info:
        expected_prefix(records, "short", "2.1.332")
    assert info.value.kind is ErrorKind.CONFIGURATION
    with pytest.raises(ReplayError, match="already occurs"):
        expected_prefix([*records[:1], {**records[1], "extra": NONCE}, *records[2:]], NONCE, "2.1.332")
    with pytest.raises(ReplayError, match="does not end with a user message of tool results"):
        expected_prefix(simple_session(1).records, NONCE, "2.1.332")  # ends with the final text
    with pytest.raises(ReplayError, match="do not answer exactly"):
        expected_prefix(records[:-1], NONCE, "2.1.332")  # one result of the parallel batch missing
    assert len(make_nonce()) >= 16 and make_nonce() != make_nonce()


def test_observation_digest_matches_manifest_definition() -> None:
    block = {"type": "tool_result", "tool_use_id": "x", "content": "o", "is_error": False}
    assert observation_digest(block) == canonical_sha256({"tool_use_id": "x", "content": "o", "is_error": False})


# -- real recordings: the rebuilt prefix is what the binary sent ------------------------------------------------


def _real_cases() -> list[tuple[Path, int]]:
    cases: list[tuple[Path, int]] = []
    for session in sorted(FIXTURES.glob("2.*/*/session.jsonl")):
        if session.parent.parent.name not in agent_spec("claude-code").versions:
            continue  # an old line's fixture (2.0.27: tool profile only) has no resume envelope of its own
        parsed = parse_session(session)
        # A boundary the parser refuses (a meta message after the results) has no rebuilt prefix to compare.
        cases.extend((session, after) for after in range(1, parsed.complete_count + 1)
                     if after not in parsed.boundary_refusals)
    return cases


REAL_CASES = _real_cases()


@pytest.mark.parametrize("session,after", REAL_CASES,
                         ids=[f"{s.parent.parent.name}-{s.parent.name}-N{n}" for s, n in REAL_CASES])
def test_real_prefix_projection_equals_the_recorded_request(session: Path, after: int) -> None:
    """The rebuilt prefix after batch N projects to exactly what the binary sent right after batch N."""
    parsed = parse_session(session)
    native = parsed.native
    assert isinstance(native, ClaudeNative)
    lines = line_bytes(native, prefix_records(native, after))
    records = [orjson.loads(line) for line in lines]
    projected = project(api_messages_from_session(records))
    boundary = [str(b["tool_use_id"]) for b in projected[-1]["content"]]
    requests = [json.loads(line) for line in (session.parent / "requests.jsonl").read_text("utf-8").splitlines()]
    sent = [project(r["body"]["messages"]) for r in requests if isinstance(r.get("body"), dict)
            and r["body"].get("messages")]
    matching = [p for p in sent if p and [b.get("tool_use_id") for b in p[-1]["content"]] == boundary]
    assert matching, f"no recorded request ends with the results of batch {after}"
    resumed = canonical_sha256(projected)  # what a resumed claude sends: the session file's content
    if session.parent.name == "interactive_tools":
        # Measured: live, Claude sends ExitPlanMode's tool_use with its input emptied (the plan lives in a plan
        # file); the session file keeps the input, and a resumed claude sends that (the gate expects it, e2e).
        _empty_exit_plan_inputs(projected)
    assert projected == matching[0]
    expected = expected_prefix(records, NONCE, parsed.version or "")
    assert expected.prefix_sha256 == resumed


def _empty_exit_plan_inputs(messages: list[dict[str, Any]]) -> None:
    for message in messages:
        for block in message["content"] if isinstance(message.get("content"), list) else []:
            if block.get("type") == "tool_use" and block.get("name") == "ExitPlanMode":
                block["input"] = {}


def test_real_cases_cover_both_versions() -> None:
    assert {s.parent.parent.name for s, _ in REAL_CASES} >= set(VERSIONS)


def test_nonce_counting_fast_path_agrees_with_the_walk() -> None:
    from forkpoint.core.hashing import _walk_count, count_text

    nonce = "__forkpoint_nonce_00ff__"
    samples = [
        {"a": [f"x{nonce}y", {nonce: nonce + nonce}], "b": 3, "c": None},
        {"text": f"\n{nonce}\u0001é{nonce}\t", "n": [1.5, True]},
        ["plain", {"k": "v"}],
    ]
    for value in samples:
        assert count_text(value, nonce) == _walk_count(value, nonce)
    # a needle that could start inside an escape sequence takes the exact walk
    assert count_text({"s": "\nabc"}, "nabc") == 0
