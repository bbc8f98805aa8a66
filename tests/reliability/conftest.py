"""Hypothesis profiles for the reliability suite: ``default`` (fast, every test run) and ``slow`` (CI).

Select with ``HYPOTHESIS_PROFILE=slow``; the slow profile runs >= 10,000 examples per fuzzed parser.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

for name, examples in (("default", 200), ("slow", 10_000)):
    settings.register_profile(
        name, max_examples=examples,
        deadline=None,  # hangs are caught by the per-example alarm in each test (a hard, interrupting deadline)
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
        derandomize=False,
    )
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

SLOW = os.environ.get("HYPOTHESIS_PROFILE") == "slow"
