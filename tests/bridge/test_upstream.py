"""The Redactor's held-back tail: exactly the longest end of a chunk that could begin the key."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from forkpoint.bridge.upstream import REDACTED, Redactor


def longest_key_start(secret: bytes, tail: bytes) -> int:
    """The definition, one length at a time."""
    return next((size for size in range(min(len(secret) - 1, len(tail)), 0, -1) if tail.endswith(secret[:size])), 0)


@given(st.text("ab-k", max_size=12), st.sampled_from(["abab", "aaaa", "ab-k", "k", "sk-ant-key"]))
def test_held_tail_is_the_longest_end_that_begins_the_key(tail_text: str, secret: str) -> None:
    tail = tail_text.encode()
    assert Redactor(secret)._held(tail) == longest_key_start(secret.encode(), tail)


def test_a_key_split_over_three_chunks_is_redacted_and_a_lookalike_passes() -> None:
    key = "sk-ant-api03-" + "A1b2C3d4" * 12
    redactor = Redactor(key)
    raw = key.encode()
    out = redactor.feed(b"data: x" + raw[:5]) + redactor.feed(raw[5:60]) + redactor.feed(raw[60:] + b" sk-ant-")
    assert out == b"data: x" + REDACTED + b" "  # " sk-ant-" could begin the key: held back
    assert redactor.flush() == b"sk-ant-"
