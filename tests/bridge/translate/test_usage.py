"""usage.py: every protocol's usage read into one record, server variants, hostile counts, sums."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkpoint.bridge.translate.usage import (
    Usage,
    from_anthropic,
    from_chat,
    from_responses,
    to_anthropic,
    to_responses,
    total,
)


def test_anthropic_cache_reads_and_writes_count_as_input() -> None:
    usage = from_anthropic({"input_tokens": 10, "cache_read_input_tokens": 90, "cache_creation_input_tokens": 5,
                            "output_tokens": 7})
    assert usage == Usage(input=105, output=7, cached=90)


def test_responses_details() -> None:
    usage = from_responses({"input_tokens": 100, "input_tokens_details": {"cached_tokens": 40},
                            "output_tokens": 30, "output_tokens_details": {"reasoning_tokens": 12}})
    assert usage == Usage(input=100, output=30, cached=40, reasoning=12)


@pytest.mark.parametrize(("raw", "cached"), [
    ({"prompt_tokens": 50, "completion_tokens": 5, "prompt_tokens_details": {"cached_tokens": 32}}, 32),  # vLLM
    ({"prompt_tokens": 50, "completion_tokens": 5, "prompt_tokens_details": None}, 0),  # vLLM, stats off
    ({"prompt_tokens": 50, "completion_tokens": 5}, 0),  # SGLang / llama.cpp without details
    ({"prompt_tokens": 50, "completion_tokens": 5, "prompt_cache_hit_tokens": 16}, 16),  # DeepSeek-style
])
def test_chat_server_variants(raw: dict[str, Any], cached: int) -> None:
    assert from_chat(raw) == Usage(input=50, output=5, cached=cached)


def test_chat_reasoning_tokens() -> None:
    raw = {"prompt_tokens": 1, "completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 4}}
    assert from_chat(raw).reasoning == 4


@pytest.mark.parametrize("raw", [None, "x", [], {"prompt_tokens": -3, "completion_tokens": True},
                                 {"prompt_tokens": 1.5, "completion_tokens": "7"}])
def test_hostile_counts_read_as_zero(raw: Any) -> None:
    assert from_chat(raw) == Usage()
    assert from_anthropic(raw) == Usage()
    assert from_responses(raw) == Usage()


counts = st.integers(min_value=0, max_value=10**9)


@given(st.lists(st.builds(Usage, counts, counts, counts, counts), max_size=8))
def test_total_sums_each_field(usages: list[Usage]) -> None:
    summed = total(usages)
    assert summed.input == sum(u.input for u in usages)
    assert summed.output == sum(u.output for u in usages)
    assert summed.cached == sum(u.cached for u in usages)
    assert summed.reasoning == sum(u.reasoning for u in usages)


@given(counts, counts, counts)
def test_anthropic_and_responses_shapes_round_trip(prompt: int, output: int, cached: int) -> None:
    usage = Usage(input=prompt + cached, output=output, cached=cached)
    assert from_anthropic(to_anthropic(usage)) == usage
    assert from_responses(to_responses(usage)) == usage


def test_cumulative_reports_of_one_call_merge() -> None:
    start = from_anthropic({"input_tokens": 10, "cache_read_input_tokens": 90, "output_tokens": 1})
    delta = from_anthropic({"output_tokens": 42})
    assert start.merged(delta) == Usage(input=100, output=42, cached=90)
    assert delta.merged(start) == start.merged(delta)
