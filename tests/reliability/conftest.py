"""Hypothesis profiles for the reliability suite: ``default`` (fast, every test run) and ``slow`` (CI).

Select with ``HYPOTHESIS_PROFILE=slow``; the slow profile runs >= 10,000 examples per fuzzed parser.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = {
    "deadline": None,  # hangs are caught by the per-example alarm in each test (a hard, interrupting deadline)
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    "derandomize": False,
}
settings.register_profile("default", max_examples=200, **_COMMON)
settings.register_profile("slow", max_examples=10_000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

SLOW = os.environ.get("HYPOTHESIS_PROFILE") == "slow"
