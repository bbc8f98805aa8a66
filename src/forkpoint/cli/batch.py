"""The body of `forkpoint batch` and its progress display (loaded when run)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from forkpoint.cli.output import GREEN, RED, YELLOW, fail, print_json, say


def run(args: argparse.Namespace) -> None:
    from forkpoint.batch import BatchOptions, run_batch, status
    from forkpoint.core.errors import ReplayError

    if args.jobs == "status":
        if args.status_dir is None:
            say("forkpoint: configuration_error: batch status needs the batch DIR", err=True, style=RED)
            raise SystemExit(2)
        try:
            summary = status(args.status_dir)
        except FileNotFoundError as error:
            say(f"forkpoint: configuration_error: {error}", err=True, style=RED)
            raise SystemExit(2) from None
        except ReplayError as error:  # a refused or corrupt ledger, named
            fail(error, args.as_json)
        _batch_summary(summary, args.as_json)
        return
    jobs = Path(args.jobs)
    if not jobs.is_file():
        say(f"forkpoint: configuration_error: jobs file {jobs} does not exist", err=True, style=RED)
        raise SystemExit(2)
    defaults = {name[len("default_"):]: value for name, value in vars(args).items()
                if name.startswith("default_") and value is not None}
    options = BatchOptions(workers=args.workers or os.cpu_count() or 1, executor=args.executor,
                           ray_address=args.ray_address, cpus_per_job=args.cpus_per_job,
                           memory_per_job=args.memory_per_job, retries=args.retries, defaults=defaults,
                           require_sandbox=args.require_sandbox)
    display = _BatchDisplay(quiet=args.as_json)
    try:
        summary = run_batch(jobs, args.out, options, progress=display.update,
                            on_bad=lambda line, reason: say(f"  job {line}: {reason}", err=True, style=YELLOW))
    except ReplayError as error:  # the batch dir held by another driver, a refused ledger
        display.close()
        fail(error, args.as_json)
    except RuntimeError as error:
        say(f"forkpoint: configuration_error: {error}", err=True, style=RED)
        raise SystemExit(2) from None
    finally:
        display.close()
    _batch_summary(summary, args.as_json)
    if summary.get("interrupted"):
        raise SystemExit(130)
    counts = summary["counts"]
    for run_id in summary.get("still_running_elsewhere") or []:
        say(f"  job run {run_id} is still running in a process that holds its lease (a stopped driver's, or a "
            "worker reported lost): left running; rerun the batch later to settle it", err=True, style=YELLOW)
    raise SystemExit(1 if counts["failed"] or counts["ambiguous"] or counts["pending"] or counts["running"]
                     or summary["bad_lines"] else 0)


class _BatchDisplay:
    """A Rich progress bar on a terminal; plain lines (every 10 s and at the end) otherwise."""

    def __init__(self, *, quiet: bool) -> None:
        self.quiet = quiet
        self.bar: Any = None
        self.task: Any = None
        self.last = 0.0

    def update(self, state: Any) -> None:
        import time

        if self.quiet:
            return
        finished = state.done + state.failed
        if sys.stderr.isatty():
            if self.bar is None:
                from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

                self.bar = Progress(TextColumn("batch"), BarColumn(), MofNCompleteColumn(),
                                    TextColumn("{task.fields[detail]}"), TimeRemainingColumn(), transient=False)
                self.bar.start()
                self.task = self.bar.add_task("batch", total=state.total, detail="")
            self.bar.update(self.task, completed=finished, detail=f"failed {state.failed} · running "
                            f"{state.running} · {state.rate:.1f}/s")
        elif time.monotonic() - self.last >= 10 or (finished == state.total and not state.running):
            self.last = time.monotonic()
            say(f"  batch: {finished}/{state.total} finished ({state.failed} failed), {state.running} running, "
                 f"{state.rate:.1f} jobs/s", err=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _batch_summary(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(summary)
        return
    counts = ", ".join(f"{name} {count}" for name, count in summary["counts"].items())
    say(f"forkpoint: batch {summary['batch_dir']}: {summary['jobs']} jobs ({counts}); "
         f"{len(summary['bad_lines'])} bad line(s)", style=GREEN if not summary["failed"] else YELLOW)
    usage = summary.get("model_usage") or {}
    if usage.get("model_calls"):
        cached = f" ({usage['cached_tokens']:,} cached)" if usage.get("cached_tokens") else ""
        say(f"  {usage['model_calls']:,} model calls, {usage['input_tokens']:,} in{cached} / "
            f"{usage['output_tokens']:,} out tokens")
    for category, count in summary["by_category"].items():
        say(f"  {category}: {count}")
    from forkpoint.cli.commands import group_text

    for group in summary.get("groups") or []:
        say(f"  {group_text(group)}")
    for job in summary["failed"][:20]:
        say(f"  job line {job['line']} after_step {job['after_step']} ({job['status']}, {job['category']}): "
             f"{job['message']}", err=True)
    partial = summary.get("partial") or []
    if partial:
        say(f"  {len(partial)} done job(s) are partial (some of their branches failed):", err=True, style=YELLOW)
    for job in partial[:20]:
        say(f"  job line {job['line']} after_step {job['after_step']} (done, partial): {job['message']}", err=True)
    if len(summary["failed"]) > 20:
        say(f"  ... {len(summary['failed']) - 20} more: forkpoint batch status DIR --json", err=True)
