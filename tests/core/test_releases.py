"""Release numbers, including the hostile ones a stranger's recording can carry."""

from __future__ import annotations

from forkpoint.core.releases import number


def test_major_minor_patch_with_prefixes_and_suffixes() -> None:
    assert number("2.1.332") == (2, 1, 332)
    assert number("v0.40.0-alpha.3") == (0, 40, 0)
    assert number("1.6") == (1, 6, 0)
    assert sorted(["1.10.0", "1.9.9", "1.17.5"], key=number) == ["1.9.9", "1.10.0", "1.17.5"]  # type: ignore[arg-type]


def test_what_is_no_release_number_is_none_and_huge_digits_never_reach_int() -> None:
    assert number(None) is None and number("") is None and number("latest") is None
    assert number("9" * 10_000) is None or number("9" * 10_000) == (999_999_999, 0, 0)
