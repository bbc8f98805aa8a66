"""Typed failures: the words and categories a fault is reported with."""

from __future__ import annotations

import errno

from forkpoint.core.errors import ErrorKind, ReplayError, no_space


def test_context_keeps_whether_the_refusal_came_before_any_effect() -> None:
    refused = ReplayError(ErrorKind.EXECUTOR, "Bash call has no string command", before_effect=True)
    wrapped = refused.with_context("batch 2")
    assert wrapped.message == "batch 2: Bash call has no string command"
    assert wrapped.before_effect and wrapped.kind is ErrorKind.EXECUTOR  # else it would be journaled as ambiguous


def test_a_full_disk_is_an_output_error_naming_the_file() -> None:
    full = no_space(OSError(errno.ENOSPC, "No space left on device"), "/out/run/manifest.json")
    assert full is not None and (full.kind.category, full.kind.exit_code) == ("output_error", 21)
    assert full.message.startswith("no space left on device writing /out/run/manifest.json")
    named = no_space(OSError(errno.EDQUOT, "Disk quota exceeded", "/state/run/journal.jsonl"), "/elsewhere")
    assert named is not None and named.message.startswith("disk quota exceeded writing /state/run/journal.jsonl")
    assert no_space(OSError(errno.EACCES, "Permission denied"), "/out") is None  # other faults keep their words
