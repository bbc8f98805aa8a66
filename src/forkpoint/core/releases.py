"""Release numbers: ``major.minor.patch`` of a version string, for ordering releases (runtimes, version families).

Here, below both ``adapters`` and ``runtimes``, so either can sort releases without importing the other."""

from __future__ import annotations

import re

#: at most 9 digits a part: a hostile 10,000-digit "version" must not reach int() (Python refuses > 4,300 digits)
_NUMBERS = re.compile(r"^v?(\d{1,9})(?:\.(\d{1,9}))?(?:\.(\d{1,9}))?")


def number(version: str | None) -> tuple[int, int, int] | None:
    """``major.minor.patch`` of a version string (pre-release suffixes ignored), None when it has none."""
    match = _NUMBERS.match(version or "")
    if match is None:
        return None
    return (int(match.group(1)), int(match.group(2) or 0), int(match.group(3) or 0))
