"""canonical_json: the orjson fast path writes exactly json.dumps's text, or steps aside."""

from __future__ import annotations

import enum
import hashlib
import json
import uuid
from collections import OrderedDict
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from forkpoint.core.hashing import (
    FAST_MIN_BYTES,
    _fast_canonical,
    canonical_bytes,
    canonical_json,
    canonical_sha256,
    sha256_hex,
    sha256_pending,
)


def reference(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


# every code point class that matters: controls, ASCII, Latin-1, BMP edges, astral; lone surrogates included
TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=12)
SCALARS = st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70) | st.floats() | TEXT
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner)
                      | st.dictionaries(TEXT, inner, max_size=4), max_leaves=20)


@settings(max_examples=400)
@given(VALUES)
def test_the_fast_path_is_json_dumps_or_nothing(value: Any) -> None:
    fast = _fast_canonical(value, min_bytes=0)
    try:
        want = reference(value).encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: json.dumps writes it, UTF-8 cannot
        assert fast is None
        return
    assert fast is None or fast == want


def test_large_values_take_the_fast_path_with_the_same_text_and_hash() -> None:
    output = "line\twith \"quotes\", \\ and \x00\x1f\x7f é 😀 \u2028\n" * (FAST_MIN_BYTES // 20)
    value = {"z": [1, True, None, -(2**63), 2**64 - 1], "a": {"tool_result": output, "é": "", "B": ()}}
    assert _fast_canonical(value) is not None
    assert canonical_json(value) == reference(value)
    assert canonical_bytes(value) == reference(value).encode("utf-8")
    assert canonical_sha256(value) == sha256_hex(reference(value))


class Color(enum.Enum):
    RED = "red"


def test_values_only_one_encoder_accepts_or_writes_differently_fall_back() -> None:
    pad = "x" * FAST_MIN_BYTES
    for odd in (1e-07, float("nan"), 2**64, OrderedDict(a=1), {1: "int key"}, (1.5, pad)):
        assert _fast_canonical([odd, pad]) is None
        assert canonical_json([odd, pad]) == reference([odd, pad])
    for foreign in (Color.RED, uuid.UUID(int=1)):  # json.dumps refuses them: so does canonical_json
        assert _fast_canonical([foreign, pad]) is None
        try:
            canonical_json([foreign, pad])
        except TypeError:
            continue
        raise AssertionError(f"{foreign!r} was serialised")
    assert _fast_canonical(["small"]) is None  # below FAST_MIN_BYTES json.dumps is used


@pytest.mark.parametrize("size", [0, 10, (1 << 20) + 3])
def test_sha256_pending_equals_hashlib_below_and_above_the_background_threshold(size: int) -> None:
    data = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    view = memoryview(data)
    chunks: list[bytes | memoryview] = [view[: size // 3], data[size // 3 : size // 2], view[size // 2 :]]
    assert sha256_pending(chunks)() == hashlib.sha256(data).hexdigest()


def test_sha256_pending_reraises_a_failure_of_its_thread() -> None:
    class NotABuffer:
        def __len__(self) -> int:  # counts as large, so the hash runs on the helper thread
            return 8 << 20

    with pytest.raises(TypeError):
        sha256_pending([b"x", NotABuffer()])()  # type: ignore[list-item]
