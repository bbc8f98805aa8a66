"""Envelope cleanup of a continued session, stream-json outcome, launch argv/env (pure parts)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from forkpoint.adapters.claude_code import launch
from forkpoint.adapters.claude_code.continued import CONTINUE_TEXT, NO_RESPONSE_TEXT, clean_continued
from forkpoint.core.errors import ReplayError
from forkpoint.testing.claude_sessions import simple_session

NONCE = "__forkpoint_nonce_0123456789abcdef__"


def _line(record: dict[str, object]) -> bytes:
    return orjson.dumps(record)


def _resumed(prefix: list[bytes], *, with_continue: bool, prompt_parent_via_meta: bool = True) -> list[bytes]:
    """What the real binaries append on resume (2.1.220 adds the isMeta continue line)."""
    boundary = orjson.loads(prefix[-1])["uuid"]
    tail: list[dict[str, object]] = [
        {"type": "queue-operation", "operation": "enqueue", "content": NONCE},
        {"type": "queue-operation", "operation": "dequeue"},
    ]
    parent = boundary
    if with_continue:
        tail.append({"type": "user", "uuid": "meta-1", "parentUuid": parent, "isMeta": True,
                     "message": {"role": "user", "content": [{"type": "text", "text": CONTINUE_TEXT}]}})
        parent = "meta-1"
    tail += [
        {"type": "assistant", "uuid": "synthetic-1", "parentUuid": parent,
         "message": {"id": "msg_syn", "model": "<synthetic>", "role": "assistant",
                     "content": [{"type": "text", "text": NO_RESPONSE_TEXT}]}},
        {"type": "user", "uuid": "nonce-1", "parentUuid": "synthetic-1",
         "message": {"role": "user", "content": NONCE}},
        {"type": "last-prompt", "lastPrompt": NONCE, "leafUuid": "nonce-1"},
        {"type": "attachment", "uuid": "att-1", "parentUuid": "nonce-1", "attachment": {"type": "task_reminder"}},
        {"type": "assistant", "uuid": "live-1", "parentUuid": "att-1",
         "message": {"id": "msg_live", "model": "m", "role": "assistant", "stop_reason": "end_turn",
                     "content": [{"type": "text", "text": "continuing"}]}},
    ]
    return prefix + [_line(r) for r in tail]


@pytest.mark.parametrize("with_continue", [True, False], ids=["2.1.220", "2.1.332"])
def test_envelope_removed_and_children_reattached(with_continue: bool) -> None:
    prefix = simple_session(1).lines()[:4]
    cleaned = clean_continued(_resumed(prefix, with_continue=with_continue), prefix, NONCE)
    assert cleaned.lines[:4] == prefix
    tail = [orjson.loads(line) for line in cleaned.lines[4:]]
    assert [r["type"] for r in tail] == ["attachment", "assistant"]
    assert tail[0]["parentUuid"] == orjson.loads(prefix[-1])["uuid"]
    assert NONCE.encode() not in b"".join(cleaned.lines)
    assert cleaned.continued_turns == 1
    assert cleaned.removed_envelope_lines == (3 if with_continue else 2)


def test_boundary_prompt_stays_as_the_one_user_message() -> None:
    prefix = simple_session(1).lines()[:4]
    cleaned = clean_continued(_resumed(prefix, with_continue=True), prefix, NONCE, "look again")
    tail = [orjson.loads(line) for line in cleaned.lines[4:]]
    users = [r for r in tail if r["type"] == "user"]
    assert len(users) == 1 and users[0]["message"]["content"] == "look again"
    assert users[0]["parentUuid"] == orjson.loads(prefix[-1])["uuid"]
    assert NONCE.encode() not in b"".join(cleaned.lines)


def test_a_rewritten_prefix_or_missing_prompt_is_refused() -> None:
    prefix = simple_session(1).lines()[:4]
    resumed = _resumed(prefix, with_continue=False)
    with pytest.raises(ReplayError, match="rewrote lines"):
        clean_continued([resumed[0], b"{}", *resumed[2:]], prefix, NONCE)
    without_prompt = [line for line in resumed if b'"nonce-1","parentUuid"' not in line]
    with pytest.raises(ReplayError, match="exactly one resume prompt"):
        clean_continued(without_prompt, prefix, NONCE)


def test_stream_outcomes() -> None:
    init = b'{"type":"system","subtype":"init","session_id":"s-1"}\n'
    ok = launch.read_stream(init + b'{"type":"result","subtype":"success","is_error":false,"num_turns":2}\n')
    assert (ok.status, ok.session_id, ok.num_turns) == ("completed", "s-1", 2)
    assert launch.read_stream(b'{"type":"result","subtype":"error_max_turns"}\nnoise\n').status == "max_steps"
    failed = launch.read_stream(b'{"type":"result","subtype":"success","is_error":true,"result":"API Error: 400"}')
    assert failed.status == "failed" and failed.detail == "API Error: 400"
    assert launch.read_stream(b"garbage").status == "unknown"


def test_launch_environment_is_isolated_and_credential_free(tmp_path: Path) -> None:
    base = {"PATH": "/usr/bin", "ANTHROPIC_API_KEY": "real-key", "OPENAI_API_KEY": "k", "GITHUB_TOKEN": "t",
            "CLAUDE_CODE_USE_BEDROCK": "1", "HOME": "/root", "PYTHONPATH": "/x", "NO_PROXY": "corp.example"}
    env = launch.environment(base, tmp_path, "http://127.0.0.1:1/token", "bridge")
    assert env["ANTHROPIC_API_KEY"] == "bridge" and env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:1/token"
    assert "OPENAI_API_KEY" not in env and "GITHUB_TOKEN" not in env and "PYTHONPATH" not in env
    assert "CLAUDE_CODE_USE_BEDROCK" not in env
    assert env["HOME"] == str(tmp_path) and env["CLAUDE_CONFIG_DIR"] == str(tmp_path / ".claude")
    assert env["NO_PROXY"].split(",")[0] == "corp.example" and "127.0.0.1" in env["NO_PROXY"]
    assert launch.project_dir_name(Path("/tmp/a.b/c_d")) == "-tmp-a-b-c-d"
    argv = launch.argv(Path("/bin/claude"), "sid", NONCE, 3)
    assert argv[argv.index("--resume") + 1] == "sid" and argv[argv.index("-p") + 1] == NONCE
    assert argv[argv.index("--max-turns") + 1] == "3"
    assert "--max-turns" not in launch.argv(Path("/bin/claude"), "sid", NONCE, None)


def test_a_retired_model_notice_of_either_continuing_version_is_passed_over() -> None:
    """Between the boundary observation and the first continued turn a newer binary may write that the session's
    model is retired: 2.1.332 marks it with ``modelRestriction``, 2.1.220 only with its warning text (measured
    continuing a real 1.0.128 session; its run was refused as "not hanging off the boundary" before)."""
    from forkpoint.adapters.claude_code.continued import _is_model_notice

    base = {"type": "system", "subtype": "informational", "level": "warning",
            "content": "Session model claude-sonnet-4-20250514 could not be restored (retired) \u2014 using the "
                       "default model instead."}
    assert _is_model_notice(base)  # 2.1.220's form
    assert _is_model_notice({**base, "content": "x", "modelRestriction": {"at": "resume"}})  # 2.1.332's marker
    assert not _is_model_notice({**base, "modelRestriction": {"at": "start"}})
    assert not _is_model_notice({**base, "level": "info"})
    assert not _is_model_notice({**base, "content": base["content"] + " Ignore the boundary."})
    assert not _is_model_notice({**base, "type": "user"})
