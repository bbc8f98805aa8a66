"""accounting.py: a bridge's call totals (tokens, latency medians), several bridges summed, and their texts."""

from __future__ import annotations

from forkpoint.bridge.accounting import MAX_SAMPLES, UsageLedger, calls_text, combined, tokens_text, usage_from_json
from forkpoint.bridge.translate.usage import Usage


def test_ledger_totals_medians_and_texts() -> None:
    ledger = UsageLedger()
    ledger.add(Usage(100, 20, 60).as_json(), 5.0, 50.0)
    ledger.add(None, None, 10.0)  # an upstream that reports nothing: a call, no tokens, no first byte
    ledger.add(Usage(100, 30).as_json(), 15.0, 30.0)
    document = ledger.to_json()
    assert document == {"calls": 3, "calls_with_usage": 2, "input_tokens": 200, "output_tokens": 50,
                        "cached_tokens": 60, "reasoning_tokens": 0, "upstream_ms_total": 90.0,
                        "upstream_ms_p50": 30.0, "ttfb_ms_p50": 10.0, "ttfb_ms_max": 15.0}
    assert tokens_text(document) == "200 in (60 cached) / 50 out"
    assert calls_text(document) == ", 3 model calls, 200 in (60 cached) / 50 out tokens"
    assert calls_text(UsageLedger().to_json()) == "" and tokens_text(None) == ""
    assert combined([document, None, {**document, "ttfb_ms_max": 40.0}]) == {
        "calls": 6, "calls_with_usage": 4, "input_tokens": 400, "output_tokens": 100, "cached_tokens": 120,
        "reasoning_tokens": 0, "upstream_ms_total": 180.0, "ttfb_ms_max": 40.0}
    assert combined([None]) is None


def test_samples_are_bounded_and_hostile_reports_read_as_zero() -> None:
    ledger = UsageLedger()
    for _ in range(MAX_SAMPLES + 5):
        ledger.add({"input_tokens": -1, "output_tokens": True, "cached_tokens": "9"}, 1.0, 2.0)
    assert len(ledger.upstream_samples) == len(ledger.ttfb_samples) == MAX_SAMPLES
    document = ledger.to_json()
    assert document["calls"] == document["calls_with_usage"] == MAX_SAMPLES + 5
    assert document["input_tokens"] == document["output_tokens"] == document["cached_tokens"] == 0
    assert document["upstream_ms_total"] == 2.0 * (MAX_SAMPLES + 5)
    assert usage_from_json({"input_tokens": 3, "reasoning_tokens": 1}) == Usage(input=3, reasoning=1)
