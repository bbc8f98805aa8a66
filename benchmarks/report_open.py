"""10. Report: a 1,000-run batch report — time to write it, its size, and the time Chromium takes to open it
(goal: open within 3 s on this machine).

The runs are clones of one real replay-only run of a generated 2-batch Claude Code session (the export benchmark's
generator, with observations). The report is written by `forkpoint.report.write_report`; Playwright drives
Debian's chromium, timing `page.goto(file://…)` until the load event plus a first filter change in the index
(the page is usable), in a fresh page each repetition.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _common as c

from forkpoint.report import write_report

GOAL_S = 3.0


def _runs(root: Path, count: int) -> Path:
    spec = importlib.util.spec_from_file_location("bench_export", Path(__file__).with_name("export.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_runs(root, count, replay=True)  # type: ignore[no-any-return]


def main() -> None:
    args = c.finish_args(c.parser(__doc__ or "", repeat=5).parse_args())
    count = 30 if args.smoke else 1000
    chromium = os.environ.get("FORKPOINT_CHROMIUM") or shutil.which("chromium")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="forkpoint-bench-report-") as tmp:
        root = Path(tmp)
        runs = _runs(root, count)
        started = time.perf_counter()
        info = write_report([runs], root / "report.html")
        write_s = time.perf_counter() - started
        opens: list[float] = []
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            for _ in range(args.repeat + 1):
                page = browser.new_page()
                started = time.perf_counter()
                page.goto(info.out.resolve().as_uri(), wait_until="load")
                page.select_option("select[name=status]", "not_started")
                page.locator("#shown").inner_text()
                opens.append(time.perf_counter() - started)
                page.close()
            browser.close()
        opens = opens[1:]  # the first open warms the browser process
    rows = [(count, f"{info.size_bytes / 1e6:.1f} MB", f"{write_s:.2f} s", f"{c.median(opens):.2f} s",
             f"{c.p95(opens):.2f} s")]
    body = c.table(("runs", "report size", "write", "open in Chromium (median)", "open p95"), rows)
    body += (f"\n\nOpen within {GOAL_S:.0f} s: {c.median(opens):.2f} s → {c.verdict(c.median(opens) <= GOAL_S)} "
             f"({args.repeat} opens after one warm-up, each a fresh page; Debian chromium, headless).")
    c.emit("report_open", "10. Report of a 1,000-run batch (size, write, open)", body, args)


if __name__ == "__main__":
    main()
