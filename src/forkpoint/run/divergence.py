"""The divergence policy (pure): which replayed calls diverged, what the run records, and what it says.

A call diverges when its fresh observation differs from the historical one after the adapter's documented
normalisation of volatile fields (``exact`` false in observations.json) — calls whose recorded observation was
reused (stale, or ``reused`` by design) are not compared. ``warn`` (default) prints a line per diverging call and
goes on, ``stop`` ends the run after the replay and before any continuation (failure category ``divergence``),
``ignore`` only records.
"""

from __future__ import annotations

from typing import Any, Literal

Policy = Literal["warn", "stop", "ignore"]
POLICIES: tuple[str, ...] = ("warn", "stop", "ignore")


def diverging(comparisons: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [row for row in comparisons
            if not row.get("exact") and not row.get("stale_reused") and not row.get("reused")]


def summary(comparisons: list[dict[str, Any]], policy: str) -> dict[str, Any]:
    """``metadata.divergence``: the policy, the count, the first diverging call and every diverging call."""
    rows = diverging(comparisons)
    calls = [{"call_id": row.get("id"), "batch": row.get("batch"), "tool": row.get("name"),
              "similarity": row.get("similarity")} for row in rows]
    return {"policy": policy, "count": len(rows), "first": calls[0] if calls else None, "calls": calls}


def observations_match(comparisons: list[dict[str, Any]] | None) -> str | None:
    """``exact`` / ``diverged`` for a replay; None when nothing was replayed (prepare-only)."""
    if comparisons is None:
        return None
    return "diverged" if diverging(comparisons) else "exact"


def warning_lines(comparisons: list[dict[str, Any]]) -> list[str]:
    """One stderr line per diverging call: call, tool, batch, and the first changed line of its diff."""
    lines = []
    for row in diverging(comparisons):
        changed = _first_change(row.get("diff"))
        error = "" if row.get("historical_is_error") == row.get("fresh_is_error") else " (error flag differs)"
        lines.append(f"divergence: call {row.get('id')} ({row.get('name')}, batch {row.get('batch')}) differs from "
                     f"the recording{error}{': ' + changed if changed else ''}")
    return lines


def stop_message(comparisons: list[dict[str, Any]]) -> str:
    rows = diverging(comparisons)
    first = rows[0]
    return (f"{len(rows)} replayed call(s) diverged from the recording (first: call {first.get('id')}, "
            f"{first.get('name')} in batch {first.get('batch')}); --on-divergence stop ended the run before the "
            "continuation (see observations.json for the diffs)")


def _first_change(diff: Any, limit: int = 80) -> str:
    """The first removed and the first added line of the diff's first hunk (``-old | +new``), each cut at limit."""
    if not isinstance(diff, dict):
        return ""
    found: dict[str, str] = {}
    hunks = 0
    for line in diff.get("lines") or []:
        text = str(line)
        hunks += text.startswith("@@")
        if hunks > 1:
            break
        if text[:1] in "+-" and not text.startswith(("+++", "---")) and text[0] not in found:
            found[text[0]] = text if len(text) <= limit else text[: limit - 1] + "…"
    return " | ".join(found[sign] for sign in "-+" if sign in found)
