"""The bridge's one redactor of its upstream key: the same held-back logic for relayed bytes and streamed text."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from forkpoint.bridge.secret import REDACTED, REDACTED_TEXT, HeldStream, UpstreamKey

KEY = "sk-ant-api03-canary-0123456789"


@given(st.text(max_size=200), st.lists(st.integers(min_value=0, max_value=300), max_size=10))
def test_text_pieces_lose_the_key_across_any_split(noise: str, cuts: list[int]) -> None:
    stream = f"{KEY}{noise[:50]}{KEY[:-1]}{KEY}{noise[50:]}{KEY[:4]}"
    bounds = sorted({min(cut, len(stream)) for cut in cuts} | {0, len(stream)})
    redactor = UpstreamKey(KEY).pieces()
    assert isinstance(redactor, HeldStream)
    out = "".join(redactor.feed(stream[a:b]) for a, b in itertools.pairwise(bounds)) + redactor.flush()
    assert out == stream.replace(KEY, REDACTED_TEXT)


def test_whole_values_and_short_keys() -> None:
    key = UpstreamKey(KEY)
    assert key.text(f"bad {KEY}") == f"bad {REDACTED_TEXT}" and key.data(KEY.encode()) == REDACTED
    assert KEY not in repr(key) and bool(key)
    for dummy in ("", None, "EMPTY", "x"):  # what local servers are given: no secret, nothing replaced
        none = UpstreamKey(dummy)
        assert not none and none.stream() is None and none.pieces() is None and none.text("EMPTY x") == "EMPTY x"
