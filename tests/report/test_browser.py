"""Reports opened in a real browser: Playwright driving Debian's Chromium (`apt install chromium`; Playwright's own
browser download is not used). Key elements visible, a diff expanded by a click, the index filtered, no console
errors, XSS canaries never executed; screenshots saved beside the test's files."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from forkpoint import runtimes
from forkpoint.report import write_report
from forkpoint.testing.recordings import replay_recording

CHROMIUM = os.environ.get("FORKPOINT_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
    if CHROMIUM is None:
        pytest.skip("no chromium on PATH (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield launched
        launched.close()


def _open(browser: Any, report: Path) -> tuple[Any, list[str]]:
    page = browser.new_page(viewport={"width": 1100, "height": 900})
    problems: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.goto(report.resolve().as_uri())
    return page, problems


def test_divergence_report_expands_a_diff_and_never_runs_the_canary(
    browser: Any, report_runs: Path, tmp_path: Path
) -> None:
    write_report([report_runs / "diverging"], tmp_path / "report.html")
    page, problems = _open(browser, tmp_path / "report.html")
    assert page.get_by_text("observations diverged").is_visible()
    call = page.locator("details.call.diverged")
    assert call.count() == 1
    diff_line = call.locator("pre.diff .add")
    assert not diff_line.is_visible()  # collapsed until clicked
    call.locator("summary").first.click()
    assert diff_line.is_visible() and diff_line.inner_text() == "+BETA changed"
    page.locator("details.call").nth(1).locator("summary").first.click()  # the page.html call, its canary as text
    assert page.get_by_text("<script>window.__forkpoint_xss = 1</script>", exact=False).first.is_visible()
    for link in page.locator("a").all():
        assert (link.get_attribute("href") or "").startswith("#")
    assert page.evaluate("() => window.__forkpoint_xss") is None
    page.screenshot(path=str(tmp_path / "divergence.png"), full_page=True)
    assert problems == []
    page.close()


def test_batch_index_filters_and_links(browser: Any, report_runs: Path, tmp_path: Path) -> None:
    write_report([report_runs], tmp_path / "report.html")
    page, problems = _open(browser, tmp_path / "report.html")
    rows = page.locator("#index tbody tr")
    assert rows.count() == 4
    assert page.locator("#shown").inner_text() == "4 of 4 runs shown"
    page.select_option("select[name=agent]", "pi")
    assert page.locator("#shown").inner_text() == "1 of 4 runs shown"
    assert rows.filter(has_text="pi-prepared").is_visible()
    page.select_option("select[name=agent]", "")
    page.click("#sort-duration")
    assert page.locator("#shown").inner_text() == "4 of 4 runs shown"
    page.get_by_role("link", name="diverging").click()
    assert page.evaluate("() => location.hash").startswith("#run-")
    page.set_viewport_size({"width": 390, "height": 800})  # phone width: nothing wider than the window
    assert page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth + 1")
    page.screenshot(path=str(tmp_path / "batch.png"))
    assert problems == []
    page.close()


@pytest.mark.e2e
def test_continued_claude_run_shows_the_continuation(browser: Any, tmp_path: Path) -> None:
    if runtimes.find("claude-code", "2.1.332") is None:
        pytest.skip("claude-code 2.1.332 is not installed (forkpoint agents install claude-code@2.1.332)")
    result = replay_recording(FIXTURES / "claude_code/2.1.332/parallel", tmp_path, agent="claude-code",
                              trajectory="session.jsonl", after=1, upstream="stub",
                              boundary_user_prompt="A prompt the report must not show.")
    assert result.exit_code == 0, result.failure
    write_report([tmp_path / "out"], tmp_path / "report.html")
    assert "A prompt the report must not show." not in (tmp_path / "report.html").read_text()
    page, problems = _open(browser, tmp_path / "report.html")
    assert page.get_by_text("agent completed").is_visible()
    assert page.get_by_text("boundary prompt", exact=True).is_visible()
    assert page.get_by_text("forkpoint stub upstream: the resumed session was accepted.").first.is_visible()
    assert page.get_by_text("Next action vs the original action N+1").is_visible()
    page.screenshot(path=str(tmp_path / "continued.png"), full_page=True)
    assert problems == []
    page.close()
