"""When to retry an upstream call that failed before its first byte reached the agent, and how long to wait.

Retried: connection errors (refused, reset, timed out before an answer), 408 (request timeout), 429 (rate
limited), 500, 502, 503, 504 and every other 5xx except 501/505 (not implemented / version not supported: the
same body gets the same answer), plus Anthropic's 529 (overloaded). Not retried: 409 (a conflict is not
transient for a replayed body: OpenAI and Anthropic do not answer 409 for load) and every other 4xx. An
``x-should-retry`` header (sent by OpenAI and Anthropic, honoured by their SDKs) overrides the status rule.

The wait is exponential backoff with full jitter (``random() * min(max_delay, base * 2**attempt)``) unless the
upstream says how long: ``retry-after-ms`` or ``Retry-After`` (seconds or an HTTP date). A requested wait longer
than ``max_retry_after_s`` ends the retries (the upstream asks for more patience than the run has). Once a byte
reached the agent nothing is retried: the agent saw part of an answer, and the run fails as retryable (exit 40).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

NOT_RETRIED_5XX = frozenset({501, 505})


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` extra attempts after the first (``--upstream-retries``), waits in seconds."""

    retries: int = 3
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    max_retry_after_s: float = 60.0

    def __post_init__(self) -> None:
        if self.retries < 0 or self.base_delay_s < 0 or self.max_delay_s < 0 or self.max_retry_after_s < 0:
            raise ValueError("retry policy values must not be negative")


@dataclass(frozen=True)
class Decision:
    """Retry after ``delay_s`` seconds, or stop; ``reason`` is the fact for the bridge log."""

    retry: bool
    delay_s: float
    reason: str


def retryable_status(status: int) -> bool:
    return status in (408, 429) or (500 <= status <= 599 and status not in NOT_RETRIED_5XX)


def retry_after_s(headers: Mapping[str, str], now: datetime) -> float | None:
    """The wait the upstream asks for: ``retry-after-ms``, else ``Retry-After`` seconds or HTTP date; ``None``
    when absent or unreadable. ``headers`` keys are matched case-insensitively."""
    lowered = {name.lower(): value for name, value in headers.items()}
    milliseconds = _number(lowered.get("retry-after-ms"))
    if milliseconds is not None:
        return milliseconds / 1000
    value = lowered.get("retry-after")
    if value is None:
        return None
    seconds = _number(value)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - now).total_seconds(), 0.0)


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if number >= 0 and number == number and number != float("inf") else None


def backoff_s(policy: RetryPolicy, attempt: int, random: Callable[[], float]) -> float:
    """Full jitter for retry number ``attempt`` (0 for the first retry)."""
    ceiling = min(policy.max_delay_s, policy.base_delay_s * 2.0 ** min(attempt, 62))
    return random() * ceiling


def decide(policy: RetryPolicy, attempt: int, *, status: int | None = None, connection_error: str | None = None,
           headers: Mapping[str, str] | None = None, first_byte_sent: bool = False, now: datetime,
           random: Callable[[], float]) -> Decision:
    """Whether call number ``attempt`` (0 = the first call) that failed with ``status`` or ``connection_error``
    is tried again. ``now`` (aware UTC) reads HTTP-date ``Retry-After``; ``random`` returns a float in [0, 1)
    (both injected: the policy stays pure and tests fix the clock and the jitter)."""
    headers = headers or {}
    what = f"HTTP {status}" if status is not None else f"connection error ({connection_error})"
    if first_byte_sent:
        return Decision(False, 0.0, f"{what} after the first byte reached the agent: not retried")
    if attempt >= policy.retries:
        return Decision(False, 0.0, f"{what}: no retries left ({policy.retries} allowed)")
    should = {name.lower(): value for name, value in headers.items()}.get("x-should-retry", "").strip().lower()
    if should == "false":
        return Decision(False, 0.0, f"{what}: the upstream said x-should-retry: false")
    if status is not None and not retryable_status(status) and should != "true":
        return Decision(False, 0.0, f"{what}: not a transient failure")
    asked = retry_after_s(headers, now)
    if asked is not None:
        if asked > policy.max_retry_after_s:
            return Decision(False, 0.0, f"{what}: Retry-After {asked:g}s exceeds {policy.max_retry_after_s:g}s")
        return Decision(True, asked, f"{what}: retry {attempt + 1}/{policy.retries} after Retry-After {asked:g}s")
    delay = backoff_s(policy, attempt, random)
    return Decision(True, delay, f"{what}: retry {attempt + 1}/{policy.retries} after {delay:.3f}s backoff")
