"""Pure parts of the Codex continuation: rollout placement, config, env, envelope cleanup."""

from __future__ import annotations

import tomllib
from pathlib import Path

import orjson
import pytest

from forkpoint.adapters.codex import launch as cx
from forkpoint.adapters.codex.envelope import DEFERRED_TOOLS
from forkpoint.core.errors import ReplayError
from forkpoint.testing.codex_rollouts import simple_rollout

NONCE = "__forkpoint_nonce_feedfacefeedfacefeedfacefeedface__"


def _lines(builder: object) -> list[bytes]:
    return [orjson.dumps(line) for line in builder.lines]  # type: ignore[attr-defined]


def test_rollout_path_and_config(tmp_path: Path) -> None:
    sid = "01a22df0-1756-7d63-b117-22d12ddaf383"
    path = cx.rollout_path(tmp_path, {"timestamp": "2026-11-30T10:20:30.5Z"}, "rollout.jsonl", sid)
    assert path == tmp_path / ".codex" / "sessions" / "2026" / "11" / "30" / f"rollout-2026-11-30T10-20-30-{sid}.jsonl"
    canonical = f"rollout-2026-11-29T01-02-03-{sid}.jsonl"
    assert cx.rollout_path(tmp_path, {"timestamp": "2026-11-30T10:20:30Z"}, canonical, sid).name == canonical
    config = tomllib.loads(cx.config_toml("http://127.0.0.1:9/tok", "gpt-5.5", "scripted"))
    assert config["model_provider"] == "scripted"
    provider = config["model_providers"]["scripted"]
    assert provider["base_url"] == "http://127.0.0.1:9/tok/v1" and provider["wire_api"] == "responses"
    assert config["model"] == "gpt-5.5" and config["features"] == {"plugins": False, "remote_plugin": False,
                                                                    "apps": False}
    builtin = tomllib.loads(cx.config_toml("http://127.0.0.1:9/tok", "gpt-5.5", "openai"))
    assert builtin["openai_base_url"] == "http://127.0.0.1:9/tok/v1" and "model_providers" not in builtin


def test_environment_has_no_credentials(tmp_path: Path) -> None:
    env = cx.environment({"OPENAI_API_KEY": "real", "PATH": "/bin", "CODEX_HOME": "/root/.codex"}, tmp_path)
    assert env["OPENAI_API_KEY"] == "forkpoint-bridge"  # the real key never reaches the agent
    assert env["CODEX_HOME"] == str(tmp_path / ".codex")
    assert env[cx.BRIDGE_KEY_ENV] == "forkpoint-bridge" and env["HOME"] == str(tmp_path)


def _resumed(prefix: list[bytes]) -> list[bytes]:
    def item(payload: dict[str, object]) -> bytes:
        return orjson.dumps({"timestamp": "t", "type": "response_item", "payload": payload})

    def event(payload: dict[str, object]) -> bytes:
        return orjson.dumps({"timestamp": "t", "type": "event_msg", "payload": payload})

    skills = "<skills_instructions>\n## Skills\n...</skills_instructions>"
    return [
        *prefix,
        event({"type": "task_started"}),
        item({"type": "message", "role": "developer", "content": [{"type": "input_text", "text": skills}]}),
        item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": NONCE}]}),
        event({"type": "user_message", "message": NONCE}),
        item({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "continuing"}]}),
        event({"type": "task_complete"}),
    ]


def test_envelope_items_are_removed() -> None:
    prefix = _lines(simple_rollout(1))
    cleaned, removed = cx.clean_continued(_resumed(prefix), prefix, NONCE, None)
    assert removed == 2 and cleaned[: len(prefix)] == prefix
    assert NONCE.encode() not in b"".join(cleaned)
    kinds = [orjson.loads(line)["payload"].get("role") for line in cleaned[len(prefix):]]
    assert kinds == [None, "assistant", None]


def test_cross_version_notices_are_removed_only_when_given() -> None:
    """0.171 resuming a 0.149 rollout writes its deferred-tools notice before the nonce; with the pair's notices
    it goes with the rest of the envelope, without them the walk back stops there (nothing else is guessed)."""
    prefix = _lines(simple_rollout(1))
    resumed = _resumed(prefix)
    nonce_at = next(i for i, line in enumerate(resumed) if NONCE.encode() in line)
    notice = {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": DEFERRED_TOOLS.text}]}
    resumed.insert(nonce_at, orjson.dumps({"timestamp": "t", "type": "response_item", "payload": notice}))
    cleaned, removed = cx.clean_continued(resumed, prefix, NONCE, None, (DEFERRED_TOOLS,))
    assert removed == 3 and b"<tools>" not in b"".join(cleaned)
    assert [orjson.loads(line)["payload"].get("role") for line in cleaned[len(prefix):]] == [None, "assistant", None]
    kept, removed = cx.clean_continued(resumed, prefix, NONCE, None)
    assert removed == 1 and sum(b"<tools>" in line or b"skills_instructions" in line
                                for line in kept[len(prefix):]) == 2


def test_boundary_prompt_replaces_the_nonce() -> None:
    prefix = _lines(simple_rollout(1))
    cleaned, removed = cx.clean_continued(_resumed(prefix), prefix, NONCE, 'look "again"')
    assert removed == 1
    joined = b"".join(cleaned)
    assert NONCE.encode() not in joined and b'look \\"again\\"' in joined


def test_rewritten_prefix_or_missing_nonce_is_refused() -> None:
    prefix = _lines(simple_rollout(1))
    with pytest.raises(ReplayError, match="rewrote"):
        cx.clean_continued([b"{}", *_resumed(prefix)[1:]], prefix, NONCE, None)
    with pytest.raises(ReplayError, match="exactly one resume prompt"):
        cx.clean_continued([*prefix, b'{"type":"event_msg","payload":{}}'], prefix, NONCE, None)
