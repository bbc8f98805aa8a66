"""`forkpoint export`: runs (and batches of runs) out as training data — parquet, messages JSONL, ATIF, native.

Pipeline, one run at a time (memory flat in the number of runs): find run dirs -> load (bounded, confined reads;
native sessions converted to OpenAI chat by each agent's ``messages`` module) -> build the row (segments, loss
mask, provenance) -> redact -> write. Runs that cannot be exported are reported with the reason and counted,
never dropped silently; the output appears only complete (temp name, rename) next to ``<out>.report.json``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from forkpoint.export.rows import TRAIN_ON, ExportOptions

FORMATS = ("parquet", "messages-jsonl", "atif", "native", "dpo", "tokens")
REPORT_SCHEMA = "forkpoint.export-report/v1"


@dataclass
class ExportReport:
    out: Path
    format: str
    rows: int = 0
    skipped: list[dict[str, str]] = field(default_factory=list)
    redaction_totals: Counter[str] = field(default_factory=Counter)
    redaction_per_row: dict[str, dict[str, int]] = field(default_factory=dict)
    options: ExportOptions = field(default_factory=ExportOptions)
    #: ``--format tokens``: the status of every captured request (rows are the ``ok``/``mismatch`` ones)
    token_requests: dict[str, int] | None = None
    #: --format dpo: the groups that gave no pair, by why (ties, single, empty)
    dpo_skipped: dict[str, int] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            **({} if self.token_requests is None else {"token_requests": self.token_requests}),
            **({"dpo_skipped": self.dpo_skipped} if self.dpo_skipped is not None else {}),
            "schema_version": REPORT_SCHEMA, "out": str(self.out), "format": self.format, "rows": self.rows,
            "skipped_count": len(self.skipped), "skipped": self.skipped, "train_on": self.options.train_on,
            "redaction": {"enabled": self.options.redact, "totals": dict(sorted(self.redaction_totals.items())),
                          "per_row": self.redaction_per_row},
        }


def export(
    paths: list[Path], fmt: str, out: Path, options: ExportOptions,
    progress: Callable[[ExportReport], None] | None = None,
) -> ExportReport:
    """Export every run under ``paths`` to ``out``; raises FileExistsError if ``out`` (or its report) exists."""
    import os

    from forkpoint.export.redact import Redactor
    from forkpoint.export.rows import build_row
    from forkpoint.export.runs import SkippedRun, find_runs, load_runs
    from forkpoint.export.writers import DpoWriter, TokensWriter, dumps_report, open_writer

    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; one of {', '.join(FORMATS)}")
    if options.train_on not in TRAIN_ON:
        raise ValueError(f"--train-on must be one of {', '.join(TRAIN_ON)}")
    report_path = out.with_name(out.name + ".report.json")
    for existing in (out, report_path):
        if os.path.lexists(existing):
            raise FileExistsError(f"{existing} exists; forkpoint export never overwrites")
    report = ExportReport(out=out, format=fmt, options=options)
    redactor = Redactor(home=str(Path.home())) if options.redact else None
    found_runs = list(find_runs(paths))
    groups = _groups(found_runs)
    writer = open_writer(fmt, out, redactor)
    try:
        for found in found_runs:
            try:
                if isinstance(found, SkippedRun):
                    raise found
                runs = load_runs(found)
            except SkippedRun as skipped:
                report.skipped.append({"path": str(skipped.path), "reason": skipped.reason})
                continue
            for run in runs:  # one row per run, or per branch of a branched run
                row = build_row(run, options, None if fmt == "native" else redactor, groups)
                if redactor is not None:
                    row["redaction_count"] = redactor.pending()
                writer.write(row, run)  # (native copies are redacted while written)
                made = redactor.take() if redactor is not None else Counter()
                if made:
                    name = str(row["run_id"]) + (f".b{row['branch']}" if row.get("branch") is not None else "")
                    report.redaction_per_row[name] = dict(sorted(made.items()))
                report.rows += 1
                if progress is not None:
                    progress(report)
        if redactor is not None:
            report.redaction_totals = Counter(redactor.counts)
        if isinstance(writer, TokensWriter):  # rows are requests, not runs
            report.rows, report.token_requests = writer.rows, dict(sorted(writer.counts.items()))
        writer.commit()
        if isinstance(writer, DpoWriter):  # the rows were its input; its output is the pairs
            report.rows, report.dpo_skipped = writer.written, writer.skipped
    except BaseException:
        writer.abort()
        raise
    report_path.write_bytes(dumps_report(report.to_json()))
    return report


def _groups(found: list[Any]) -> Any:
    """The reward groups over every run dir found (forkpoint.run.groups): statistics and original reward."""
    from forkpoint.run.groups import collect_groups
    from forkpoint.run.scoring import group_stats

    return {gid: (group_stats(rewards), original)
            for gid, (rewards, original) in collect_groups(p for p in found if isinstance(p, Path)).items()}
