"""What a run's model calls cost: tokens the upstream reported, the number of calls, upstream latency.

A model call is one request the bridge handed to its upstream (a validated step or a cleared helper request;
retries of one request inside the upstream are one call). Per call the bridge records the normalised usage the
upstream reported (``RequestRecord.usage``), the time from handing the body to the upstream until the answer's
first byte (headers) went to the agent (``ttfb_ms``) and until the answer ended (``upstream_ms``). ``UsageLedger``
sums them for ``BridgeSummary.model_usage`` (result metadata ``model_usage``); ``combined`` sums the ledgers of
several bridges (a branched run's branches). Counts only: never a body, a prompt or a key.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from forkpoint.bridge.translate.usage import Usage, count

#: latency samples kept for the medians (a flood beyond it still counts in the totals)
MAX_SAMPLES = 10_000
TOKEN_KEYS = ("input_tokens", "output_tokens", "cached_tokens", "reasoning_tokens")
#: the keys of ``model_usage`` that add up across bridges
ADDITIVE_KEYS = ("calls", "calls_with_usage", *TOKEN_KEYS, "upstream_ms_total")
#: a call's (time to first byte, upstream total) in ms; the first is None when the answer began only at its end (an
#: error the bridge itself answers after the call)
Timing = tuple[float | None, float | None]


def usage_from_json(reported: Mapping[str, Any]) -> Usage:
    """A ``Usage.as_json`` record read back (hostile counts read as 0)."""
    return Usage(*(count(reported.get(key)) for key in TOKEN_KEYS))


@dataclass
class UsageLedger:
    """The running totals of one bridge (the caller holds the bridge's lock)."""

    calls: int = 0
    calls_with_usage: int = 0
    usage: Usage = field(default_factory=Usage)
    upstream_ms_total: float = 0.0
    ttfb_ms_max: float | None = None
    ttfb_samples: list[float] = field(default_factory=list)
    upstream_samples: list[float] = field(default_factory=list)

    def add(self, usage: Mapping[str, Any] | None, ttfb_ms: float | None, upstream_ms: float) -> None:
        self.calls += 1
        if usage is not None:
            self.calls_with_usage += 1
            self.usage += usage_from_json(usage)
        self.upstream_ms_total += upstream_ms
        if len(self.upstream_samples) < MAX_SAMPLES:
            self.upstream_samples.append(upstream_ms)
        if ttfb_ms is not None:
            self.ttfb_ms_max = ttfb_ms if self.ttfb_ms_max is None else max(self.ttfb_ms_max, ttfb_ms)
            if len(self.ttfb_samples) < MAX_SAMPLES:
                self.ttfb_samples.append(ttfb_ms)

    def to_json(self) -> dict[str, Any]:
        """``model_usage``: calls, tokens (``input`` includes ``cached``), latency totals and medians in ms."""
        return {"calls": self.calls, "calls_with_usage": self.calls_with_usage, **self.usage.as_json(),
                "upstream_ms_total": round(self.upstream_ms_total, 3),
                "upstream_ms_p50": _median(self.upstream_samples), "ttfb_ms_p50": _median(self.ttfb_samples),
                "ttfb_ms_max": self.ttfb_ms_max}


def combined(documents: Iterable[Mapping[str, Any] | None]) -> dict[str, Any] | None:
    """Several bridges' ``model_usage`` summed (medians do not add up: only the additive keys and the largest
    time to first byte); None when none of them has one."""
    found = [document for document in documents if isinstance(document, Mapping)]
    if not found:
        return None
    totals: dict[str, Any] = {key: sum(_number(document.get(key)) for document in found) for key in ADDITIVE_KEYS}
    totals["upstream_ms_total"] = round(totals["upstream_ms_total"], 3)
    maxima = [_number(document.get("ttfb_ms_max")) for document in found if document.get("ttfb_ms_max") is not None]
    totals["ttfb_ms_max"] = max(maxima) if maxima else None
    return totals


def tokens_text(model_usage: Mapping[str, Any] | None) -> str:
    """How a summary line or table shows the tokens: ``1,200 in (800 cached) / 90 out`` (empty when unknown)."""
    if not isinstance(model_usage, Mapping) or not model_usage.get("calls_with_usage"):
        return ""
    cached = _number(model_usage.get("cached_tokens"))
    return (f"{_number(model_usage.get('input_tokens')):,.0f} in" + (f" ({cached:,.0f} cached)" if cached else "")
            + f" / {_number(model_usage.get('output_tokens')):,.0f} out")


def calls_text(model_usage: Mapping[str, Any] | None) -> str:
    """The summary line's part: ``, 3 model calls, 1,200 in / 90 out tokens`` (empty without model calls)."""
    if not isinstance(model_usage, Mapping) or not model_usage.get("calls"):
        return ""
    calls, tokens = _number(model_usage.get("calls")), tokens_text(model_usage)
    return f", {calls:,.0f} model call{'' if calls == 1 else 's'}" + (f", {tokens} tokens" if tokens else "")


def _median(samples: list[float]) -> float | None:
    return round(statistics.median(samples), 3) if samples else None


def _number(value: Any) -> float:
    return value if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0 else 0
