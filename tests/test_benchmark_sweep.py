"""The release sweep's choice of releases (benchmarks/_sweep.py) and its classification of outcomes: pure
functions over a registry's ``npm view <package> time --json`` answer (or PyPI's JSON API answer) and a worker's
record."""

from __future__ import annotations

import itertools
import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
try:
    import _sweep as sweep  # type: ignore[import-not-found]
finally:
    sys.path.remove(str(BENCHMARKS))

SINCE = datetime(2026, 6, 5, tzinfo=UTC)


def _times(*pairs: tuple[str, str]) -> dict[str, object]:
    return {"created": "2024-01-01T00:00:00.000Z", "modified": "2026-12-01T00:00:00.000Z",
            **{version: f"{day}T12:00:00.000Z" for version, day in pairs}}


def test_the_window_keeps_plain_releases_published_since_the_date_and_leaves_out_backfills() -> None:
    times = _times(("2.0.0", "2026-05-01"), ("2.1.0", "2026-06-04"), ("2.1.1", "2026-06-05"),
                   ("2.1.2-beta.1", "2026-06-06"), ("0.101.0-linux-x64", "2026-06-07"), ("2.1.2", "2026-07-01"),
                   ("1.0.9", "2026-07-02"), ("2.0.5", "2026-08-01"), ("2.2.0", "2026-09-01"),
                   ("junk", "2026-09-02"), ("2.3.0", "not a date"))
    window, backfills = sweep.releases_in_window(times, SINCE)
    # 2.1.0 is a day early; pre-releases, platform packages, junk and undated entries are no releases;
    # 1.0.9 and 2.0.5 were published after 2.1.x (a mirror catching up): backfills, not releases of the period
    assert window == ["2.1.1", "2.1.2", "2.2.0"]
    assert backfills == ["1.0.9", "2.0.5"]
    assert sweep.choose_releases(times, SINCE, None) == window
    assert sweep.choose_releases(times, SINCE, 10) == window


def test_an_earlier_window_ends_before_until_and_the_two_windows_split_the_releases_exactly() -> None:
    older = datetime(2025, 12, 5, tzinfo=UTC)
    times = _times(("1.0.0", "2025-12-04"), ("1.1.0", "2025-12-05"), ("1.2.0", "2026-02-01"),
                   ("1.0.5", "2026-03-01"), ("1.3.0", "2026-06-04"), ("1.3.1", "2026-06-05"), ("1.4.0", "2026-07-01"),
                   ("1.2.9", "2026-07-02"))
    window, backfills = sweep.releases_in_window(times, older, SINCE)
    # 1.0.0 is before the window, 1.3.1 on its (exclusive) end; 1.0.5 came after 1.2.0: a backfill
    assert window == ["1.1.0", "1.2.0", "1.3.0"] and backfills == ["1.0.5"]
    later, later_backfills = sweep.releases_in_window(times, SINCE)
    assert later == ["1.3.1", "1.4.0"] and later_backfills == ["1.2.9"]
    everything, all_backfills = sweep.releases_in_window(times, older)
    assert everything == window + later and all_backfills == backfills + later_backfills
    # a sample chooses within the window only: its newest is the window's last release, not 1.4.0
    assert sweep.choose_releases(times, older, 2, SINCE) == ["1.1.0", "1.3.0"]
    assert sweep.choose_releases(times, older, None, SINCE) == window


def test_a_sample_keeps_the_newest_the_oldest_and_every_minor_lines_last_release() -> None:
    # one release a week on the 1.4 line, with a 1.5 line in between whose last release is mid-window
    days = [f"2026-{month:02d}-{day:02d}" for month in range(6, 12) for day in (8, 15, 22)]
    versions = [f"1.4.{n}" for n in range(8)] + [f"1.5.{n}" for n in range(3)] + [f"1.6.{n}" for n in range(7)]
    times = _times(*zip(versions, days, strict=True))
    chosen = sweep.choose_releases(times, SINCE, 5)
    assert len(chosen) == 5
    assert chosen[0] == "1.4.0" and chosen[-1] == "1.6.6"  # oldest and newest, oldest first
    assert {"1.4.7", "1.5.2"} <= set(chosen)  # each minor line's last release
    # the fifth is spread: not next to a release already chosen
    (fifth,) = set(chosen) - {"1.4.0", "1.4.7", "1.5.2", "1.6.6"}
    assert fifth in {"1.6.2", "1.6.3"}
    assert sweep.choose_releases(times, SINCE, 1) == ["1.6.6"]
    assert sweep.choose_releases(times, SINCE, 0) == []


def test_a_sample_smaller_than_the_minor_lines_spreads_over_the_lines_last_releases() -> None:
    # Codex-like: a new minor line every week
    times = _times(*((f"0.{140 + n}.{n % 3}", f"2026-{6 + n // 4:02d}-{1 + 7 * (n % 4):02d}") for n in range(24)))
    window, _ = sweep.releases_in_window(times, SINCE)
    chosen = sweep.choose_releases(times, SINCE, 4)
    assert chosen[0] == window[0] and chosen[-1] == window[-1] and len(chosen) == 4
    positions = [window.index(v) for v in chosen]
    assert min(b - a for a, b in itertools.pairwise(positions)) >= 5  # spread, not bunched


def test_classify_names_the_first_failing_check_and_flags_what_is_not_a_named_difference() -> None:
    gate = {"check": "resume_envelope", "against": "2.1.332", "ok": False,
            "detail": "the gate refuses it: message 3 is not the closure"}
    record = {"installed": True, "ok": False, "reason": "no verified version matched",
              "checks": [{"check": "record", "ok": True, "detail": "exit 0"}, gate]}
    assert sweep.classify(record) == ("named", "resume_envelope against 2.1.332: the gate refuses it: message 3 "
                                               "is not the closure")
    assert sweep.classify({"installed": True, "ok": True, "maps_to": "0.171.0"}) == ("calibrated", "as 0.171.0")
    assert sweep.classify({"installed": False, "reason": "E404"}) == ("not-installed", "E404")
    npm = ("configuration_error: npm install opencode-ai@1.17.15 exited 1: /x/opencode-ai\nnpm error command failed\n"
           "npm error notarget No matching version found for opencode-linux-x64@1.17.15.\nnpm error In most cases")
    assert sweep.classify({"installed": False, "reason": npm}) == (
        "not-installed", "No matching version found for opencode-linux-x64@1.17.15")
    # forkpoint's own install code failing on a package npm installed is a forkpoint bug, not "not installed"
    layout = ("internal_error: @openai/codex: expected one native binary vendor/*/bin/codex in /x/node_modules/"
              "@openai/codex-linux-x64, found 0")
    assert sweep.classify({"installed": False, "reason": layout}) == ("unnamed", f"install: {layout}")
    no_build = ("internal_error: @openai/codex: expected one installed native package for linux-x64 among "
                "@openai/codex-darwin-arm64, @openai/codex-linux-x64; found none")  # the registry has no build
    assert sweep.classify({"installed": False, "reason": no_build}) == ("not-installed", no_build)
    assert sweep.classify({"timeout": 900.0})[0] == "unnamed"
    assert sweep.classify({"crash": "exit 1: Traceback"})[0] == "unnamed"
    probe = {"installed": True, "ok": False, "reason": "the probe session did not complete as scripted",
             "checks": [{"check": "record", "ok": False, "detail": "exit 1; stderr: boom"}]}
    assert sweep.classify(probe) == ("unnamed", "record: exit 1; stderr: boom")
    raised = {"installed": True, "ok": False, "reason": "the release made no model request after --resume",
              "checks": [{"check": "record", "ok": True, "detail": "exit 0"}]}
    assert sweep.classify(raised) == ("unnamed", "the release made no model request after --resume")
    not_continued = {**gate, "detail": "not continued: the bridge did not start"}
    assert sweep.classify({**record, "checks": [not_continued]})[0] == "unnamed"
    refused = {"check": "record", "ok": False, "detail": "release difference: no option `--skip-trust` (forkpoint's "
                                                         "command passes it): exit 1; stderr: ..."}
    assert sweep.classify({**probe, "checks": [refused]}) == ("named", f"record: {refused['detail']}")
    no_replay = {"check": "tool_observations", "ok": False, "detail": "replay failed: pi 1.6.0 is not installed"}
    assert sweep.classify({**record, "checks": [no_replay]})[0] == "unnamed"
    # an openhands-ai release without V0's agent loop: the probe names it (adapters/openhands/calibrate.py)
    not_v0 = {"check": "release", "ok": False, "detail": "openhands-ai 1.11.0 has no `openhands.core.main`: ..."}
    assert sweep.classify({**record, "checks": [not_v0]}) == ("named", f"release: {not_v0['detail']}")


def test_the_named_record_prefix_is_the_one_the_calibration_writes() -> None:
    from forkpoint.adapters.kit.calibration import RELEASE_DIFFERENCE

    assert sweep.NAMED_RECORD == RELEASE_DIFFERENCE


def test_the_run_order_takes_each_agent_in_turn_newest_first() -> None:
    order = sweep.interleave({"a": ["1", "2", "3"], "b": ["7"]})
    assert order == [("a", "3"), ("b", "7"), ("a", "2"), ("a", "1")]


#: the registry's real answers (``npm view <package> time --json``, 2026-12-05) for the three agents the sweep
#: gained: release dates scrambled by a mirror catching up on old lines (Gemini CLI 0.1.15 dated February 2026)
NPM_TIMES = Path(__file__).parent / "fixtures" / "npm_times"
TWELVE_MONTHS = datetime(2025, 12, 5, tzinfo=UTC)


def test_the_sweep_covers_gemini_cli_qwen_code_and_copilot_cli_through_their_npm_packages() -> None:
    from forkpoint.adapters import agent_spec
    from forkpoint.adapters.spec import NpmPackage

    assert {"gemini-cli", "qwen-code", "copilot-cli"} <= set(sweep.SWEPT)
    packages = {agent: package for agent in sweep.SWEPT if isinstance(package := agent_spec(agent).runtime, NpmPackage)}
    assert set(packages) == set(sweep.SWEPT) - {"mini-swe-agent", "openhands-sdk", "openhands"}  # listed by npm view
    assert {a: p.package for a, p in packages.items() if a in ("gemini-cli", "qwen-code", "copilot-cli")} == {
        "gemini-cli": "@google/gemini-cli", "qwen-code": "@qwen-code/qwen-code", "copilot-cli": "@github/copilot"}


def test_a_sample_of_seven_spreads_over_twelve_months_of_each_new_agents_real_registry_answer() -> None:
    expected = {  # what the sweep of 2026-12-05 calibrated (docs/agents.md, "Release sweep")
        "gemini-cli": (17, 64, ["0.24.0", "0.33.0", "0.35.3", "0.45.2", "0.51.0", "0.56.0", "0.61.0"]),
        "qwen-code": (11, 9, ["0.7.1", "0.12.0", "0.15.6", "0.23.0", "0.23.4", "0.24.2", "0.24.4"]),
        "copilot-cli": (34, 64, ["0.0.384", "0.0.420", "1.0.48", "1.0.61", "1.0.68", "1.0.82", "1.0.102"])}
    for agent, (in_window, left_out, seven) in expected.items():
        times = json.loads((NPM_TIMES / f"{agent}.json").read_text("utf-8"))
        window, backfills = sweep.releases_in_window(times, TWELVE_MONTHS)
        assert (len(window), len(backfills)) == (in_window, left_out), agent
        chosen = sweep.choose_releases(times, TWELVE_MONTHS, 7)
        assert chosen == seven, agent
        # the oldest and the newest of the window, and spread: all but one of the months with a release are covered
        assert chosen[0] == window[0] and chosen[-1] == window[-1]
        months = {str(times[v])[:7] for v in window}
        assert len({str(times[v])[:7] for v in chosen}) >= min(7, len(months)) - 1, agent
        assert set(chosen) <= set(sweep.choose_releases(times, TWELVE_MONTHS, 8)), agent  # a larger sample extends it
    gemini = json.loads((NPM_TIMES / "gemini-cli.json").read_text("utf-8"))
    # an old line the mirror dates to February 2026 (after 0.24.0) is a backfill, never a release of the period
    assert "0.1.15" in sweep.releases_in_window(gemini, TWELVE_MONTHS)[1]


def _files(*uploads: tuple[str, bool]) -> list[dict[str, object]]:
    """A release's files in PyPI's JSON API shape (the fields the sweep reads, and a few it does not)."""
    return [{"filename": f"pkg-{n}.whl", "packagetype": "bdist_wheel", "upload_time": stamp[:19],
             "upload_time_iso_8601": stamp, "yanked": yanked, "yanked_reason": None}
            for n, (stamp, yanked) in enumerate(uploads)]


def test_a_pypi_answer_dates_each_release_by_its_first_upload_and_leaves_out_yanked_and_empty_ones() -> None:
    answer = {"info": {"name": "openhands-ai", "version": "1.2.0"}, "urls": [], "releases": {
        "0.62.0": _files(("2025-11-11T18:43:05.349003Z", False)),
        # the sdist a day after the wheel: the release is dated by its first file
        "1.0.0": _files(("2025-12-17T09:00:00.000000Z", False), ("2025-12-16T14:26:27.349003Z", False)),
        "1.1.0": _files(("2026-01-10T10:00:00.000000Z", True)),  # every file yanked: no release
        "1.1.1": _files(("2026-01-11T10:00:00.000000Z", True), ("2026-01-11T10:05:00.000000Z", False)),
        "1.2.0a1": _files(("2026-02-01T10:00:00.000000Z", False)),  # a pre-release
        "1.2.0": _files(("2026-03-01T10:00:00.000000Z", False)),
        "1.3.0": [],  # a release with no files (registered, never uploaded)
        "1.4.0": _files(("not a date", False))}}
    times = sweep.pypi_release_times(answer)
    assert times == {"0.62.0": "2025-11-11T18:43:05.349003Z", "1.0.0": "2025-12-16T14:26:27.349003Z",
                     "1.1.1": "2026-01-11T10:05:00.000000Z", "1.2.0a1": "2026-02-01T10:00:00.000000Z",
                     "1.2.0": "2026-03-01T10:00:00.000000Z"}
    since = datetime(2025, 12, 5, tzinfo=UTC)
    assert sweep.releases_in_window(times, since) == (["1.0.0", "1.1.1", "1.2.0"], [])
    assert sweep.choose_releases(times, since, 2) == ["1.0.0", "1.2.0"]


def test_a_pypi_answer_without_releases_is_refused() -> None:
    with pytest.raises(RuntimeError, match="no 'releases'"):
        sweep.pypi_release_times({"info": {"name": "x"}})


def test_a_pypi_agent_is_sampled_unless_a_sample_is_asked_for_and_an_npm_agent_is_swept_whole() -> None:
    assert sweep.sample_for("openhands", None) == sweep.PYPI_SAMPLE
    assert sweep.sample_for("mini-swe-agent", 12) == 12
    assert sweep.sample_for("codex", None) is None


def test_a_pypi_release_is_installed_with_the_dependencies_of_the_day_after_it_was_published() -> None:
    assert sweep.deps_date("2026-01-15T18:55:38.054750Z") == "2026-01-16T18:55:38Z"
    assert sweep.deps_date("not a date") is None and sweep.deps_date(None) is None
