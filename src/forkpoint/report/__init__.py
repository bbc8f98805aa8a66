"""`forkpoint report`: one self-contained HTML file for a run or a directory of runs (a batch, an output root).

collect (each run dir's own documents, read bounded and confined) -> render (pure, everything escaped) -> one
file written under a temporary name and renamed.
"""

from __future__ import annotations

import datetime as dt
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ReportInfo:
    out: Path
    runs: int
    skipped: list[tuple[str, str]]
    size_bytes: int


def write_report(paths: list[Path], out: Path) -> ReportInfo:
    from forkpoint import __version__
    from forkpoint.export.runs import SkippedRun, find_runs
    from forkpoint.report.collect import collect
    from forkpoint.report.render import page

    views = []
    skipped: list[tuple[str, str]] = []
    for found in find_runs(paths):
        try:
            if isinstance(found, SkippedRun):
                raise found
            views.append(collect(found))
        except SkippedRun as error:
            skipped.append((str(error.path), error.reason))
    if not views:
        raise FileNotFoundError("no forkpoint run to report: " + "; ".join(f"{p}: {r}" for p, r in skipped))
    generated = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    document = page(views, skipped, generated=generated, version=__version__).encode("utf-8")
    temp = out.with_name(f".{out.name}.partial-{os.getpid()}")
    temp.write_bytes(document)
    os.replace(temp, out)
    return ReportInfo(out=out, runs=len(views), skipped=skipped, size_bytes=len(document))
