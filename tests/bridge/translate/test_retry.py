"""retry.py: which failures are retried, backoff with full jitter, Retry-After, bounds."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from forkpoint.bridge.translate.retry import RetryPolicy, backoff_s, decide, retry_after_s, retryable_status

NOW = datetime(2026, 12, 2, 4, 0, 0, tzinfo=UTC)


def half() -> float:
    return 0.5


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 504, 529, 599])
def test_transient_statuses_are_retried(status: int) -> None:
    assert retryable_status(status)
    decision = decide(RetryPolicy(), 0, status=status, now=NOW, random=half)
    assert decision.retry and f"HTTP {status}" in decision.reason


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 413, 422, 501, 505])
def test_deterministic_failures_are_not_retried(status: int) -> None:
    assert not retryable_status(status)
    assert not decide(RetryPolicy(), 0, status=status, now=NOW, random=half).retry


def test_connection_errors_are_retried_until_the_bound() -> None:
    policy = RetryPolicy(retries=3)
    retried = [decide(policy, attempt, connection_error="ConnectionResetError", now=NOW, random=half).retry
               for attempt in range(5)]
    assert retried == [True, True, True, False, False]
    assert "no retries left (3 allowed)" in decide(policy, 3, status=503, now=NOW, random=half).reason


def test_zero_retries_never_retries() -> None:
    assert not decide(RetryPolicy(retries=0), 0, status=503, now=NOW, random=half).retry


def test_nothing_is_retried_after_the_first_byte() -> None:
    decision = decide(RetryPolicy(), 0, connection_error="reset", first_byte_sent=True, now=NOW, random=half)
    assert not decision.retry and "first byte" in decision.reason


def test_full_jitter_backoff_doubles_and_is_capped() -> None:
    policy = RetryPolicy(base_delay_s=0.5, max_delay_s=3.0)
    assert [backoff_s(policy, attempt, lambda: 1.0) for attempt in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert backoff_s(policy, 2, lambda: 0.0) == 0.0
    assert decide(policy, 1, status=503, now=NOW, random=lambda: 0.25).delay_s == 0.25


@given(st.integers(min_value=0, max_value=10_000), st.floats(min_value=0, max_value=0.999999))
def test_backoff_stays_within_zero_and_the_cap(attempt: int, draw: float) -> None:
    policy = RetryPolicy()
    assert 0 <= backoff_s(policy, attempt, lambda: draw) <= policy.max_delay_s


def test_retry_after_seconds_date_and_milliseconds() -> None:
    assert retry_after_s({"Retry-After": "7"}, NOW) == 7.0
    assert retry_after_s({"retry-after": "Wed, 02 Dec 2026 04:00:30 GMT"}, NOW) == 30.0
    assert retry_after_s({"retry-after": "Wed, 02 Dec 2026 03:00:00 GMT"}, NOW) == 0.0  # in the past
    assert retry_after_s({"retry-after-ms": "250", "retry-after": "9"}, NOW) == 0.25
    for bad in ("soon", "-1", "nan", "inf", ""):
        assert retry_after_s({"retry-after": bad}, NOW) is None
    assert retry_after_s({}, NOW) is None


def test_retry_after_is_honoured_instead_of_backoff() -> None:
    decision = decide(RetryPolicy(), 0, status=429, headers={"Retry-After": "2"}, now=NOW, random=half)
    assert decision.retry and decision.delay_s == 2.0 and "Retry-After 2s" in decision.reason


def test_a_retry_after_beyond_the_cap_ends_the_retries() -> None:
    decision = decide(RetryPolicy(max_retry_after_s=60), 0, status=429, headers={"Retry-After": "3600"}, now=NOW,
                      random=half)
    assert not decision.retry and "exceeds" in decision.reason


def test_x_should_retry_overrides_the_status_rule() -> None:
    assert not decide(RetryPolicy(), 0, status=503, headers={"x-should-retry": "false"}, now=NOW, random=half).retry
    assert decide(RetryPolicy(), 0, status=409, headers={"X-Should-Retry": "true"}, now=NOW, random=half).retry


def test_negative_policy_values_are_refused() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(retries=-1)
