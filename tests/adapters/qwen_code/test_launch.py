"""The continued Qwen Code file as the model saw it (pure): the nonce record removed and the chain relinked, or
the nonce replaced by the boundary prompt; a nonce anywhere else is refused."""

from __future__ import annotations

import json

import pytest

from forkpoint.adapters.qwen_code.launch import restore_prompt
from forkpoint.core.errors import ReplayError

NONCE = "__forkpoint_nonce_test__"


def _line(uuid: str, parent: str | None, kind: str, text: str) -> bytes:
    return json.dumps({"uuid": uuid, "parentUuid": parent, "type": kind,
                       "message": {"role": "user", "parts": [{"text": text}]}}).encode() + b"\n"


PREFIX = _line("a", None, "user", "task") + _line("b", "a", "tool_result", "obs")


def test_without_a_prompt_the_nonce_record_goes_and_the_chain_is_relinked() -> None:
    data = PREFIX + _line("n", "b", "user", NONCE) + _line("c", "n", "assistant", "next")
    restored = restore_prompt(data, len(PREFIX), NONCE, None)
    assert restored.startswith(PREFIX) and NONCE.encode() not in restored
    assert json.loads(restored.splitlines()[-1])["parentUuid"] == "b"


def test_with_a_prompt_the_nonce_becomes_it() -> None:
    data = PREFIX + _line("n", "b", "user", NONCE)
    assert restore_prompt(data, len(PREFIX), NONCE, 'Say "hi"') == PREFIX + _line("n", "b", "user", 'Say "hi"')


def test_a_nonce_outside_its_record_is_refused() -> None:
    data = PREFIX + _line("n", "b", "assistant", f"echo {NONCE}")
    with pytest.raises(ReplayError, match="nonce"):
        restore_prompt(data, len(PREFIX), NONCE, None)
