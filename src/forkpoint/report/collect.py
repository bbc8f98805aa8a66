"""What a report shows of one run, read from its run dir (I/O, bounded and confined like the exporter's reads).

Everything comes from the run's own documents: result.json (phase, quality, status, failure, metadata),
manifest.json (the batches and their calls), observations.json (previews and diffs), next-action.json, the
journal copy (timings), and the native sessions converted to chat (the continuation's turns).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from forkpoint.adapters import exporter
from forkpoint.core.results import ReplayResult
from forkpoint.export.runs import RESULT_SCHEMA, RunFiles, SkippedRun, artifact_parts, typed_result

MAX_FILE_BYTES = 64 * 1024 * 1024


@dataclass
class RunView:
    path: Path
    result: ReplayResult
    batches: list[dict[str, Any]]
    observations: dict[str, dict[str, Any]]
    next_action: dict[str, Any] | None
    live: list[dict[str, Any]]
    call_ms: dict[str, float] = field(default_factory=dict)
    branches: dict[str, Any] | None = None  # branches.json of a branched run
    #: each branch's live turns (its continued session after the shared prefix), by branch index
    branch_live: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    duration_s: float | None = None
    upstream: str | None = None

    @property
    def run_id(self) -> str:
        return str(self.result.run_id)

    @property
    def metadata(self) -> dict[str, Any]:
        return self.result.metadata

    @property
    def diverged(self) -> list[dict[str, Any]]:
        return [row for row in self.observations.values()
                if not row.get("exact") and not row.get("stale_reused") and not row.get("reused")]

    @property
    def observations_match(self) -> str:
        if not self.observations:
            return "not_replayed"
        return "diverged" if self.diverged else "exact"


def collect(run_dir: Path) -> RunView:
    with RunFiles(run_dir, MAX_FILE_BYTES) as files:
        result = files.json("result.json", required=True)
        if not isinstance(result, dict) or result.get("schema_version") != RESULT_SCHEMA:
            raise SkippedRun(run_dir, f"result.json is not {RESULT_SCHEMA}")
        manifest = files.json("manifest.json") or {}
        observations = files.json("observations.json") or {}
        next_action = files.json("next-action.json")
        branches = files.json("branches.json")
        events = files.read("replay-events.jsonl") or b""
        typed = typed_result(run_dir, result)
        agent = typed.agent.name if typed.agent else None
        live: list[dict[str, Any]] = []
        prefix_data = files.read(*artifact_parts(result, "native_prefix"))
        continued_data = files.read(*artifact_parts(result, "continued_native_session"))
        branch_data = _branch_sessions(files, branches)
    convert = exporter(agent)
    if convert is not None and prefix_data is not None and continued_data is not None:
        try:
            prefix_count = len(convert(prefix_data).messages)
            live = convert(continued_data).messages[prefix_count:]
        except ValueError:
            live = []
    branch_live: dict[str, list[dict[str, Any]]] = {}
    if convert is not None and prefix_data is not None and branch_data:
        try:
            shared = len(convert(prefix_data).messages)
        except ValueError:
            shared = None
        for index, data in branch_data.items() if shared is not None else ():
            try:
                branch_live[index] = convert(data).messages[shared:]
            except ValueError:
                continue
    view = RunView(
        path=run_dir,
        result=typed,
        batches=[b for b in manifest.get("batches") or [] if isinstance(b, dict)] if isinstance(manifest, dict) else [],
        observations={str(row.get("id")): row for row in (observations.get("observations") or [])
                      if isinstance(row, dict)} if isinstance(observations, dict) else {},
        next_action=next_action if isinstance(next_action, dict) else None,
        live=live,
        branches=branches if isinstance(branches, dict) else None,
        branch_live=branch_live,
    )
    _timings(view, events)
    return view


def _branch_sessions(files: RunFiles, branches: Any) -> dict[str, bytes]:
    """Each branch's continued native session (``branches/<i>/native/continued/<name>``), read confined."""
    found: dict[str, bytes] = {}
    rows = branches.get("branches") if isinstance(branches, dict) else None
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        index, name = str(row.get("branch")), str(row.get("continued_path") or "").rsplit("/", 1)[-1]
        data = files.read("branches", index, "native", "continued", name) if name else None
        if data is not None:
            found[index] = data
    return found


def _timings(view: RunView, events: bytes) -> None:
    """Run duration, per-call durations and the upstream, from the journal copy's timestamps."""
    started: dict[str, dt.datetime] = {}
    first: dt.datetime | None = None
    last: dt.datetime | None = None
    for line in events.splitlines():
        try:
            event = orjson.loads(line)
            at = dt.datetime.fromisoformat(str(event.get("at", "")).replace("Z", "+00:00"))
        except (ValueError, TypeError, AttributeError):
            continue
        first = first or at
        last = at
        kind = event.get("event")
        if kind == "tool_started":
            started[str(event.get("call_id"))] = at
        elif kind == "tool_finished" and str(event.get("call_id")) in started:
            view.call_ms[str(event["call_id"])] = (at - started[str(event["call_id"])]).total_seconds() * 1000
        elif kind == "continuation_started":
            view.upstream = event.get("upstream")
    if first is not None and last is not None:
        view.duration_s = (last - first).total_seconds()
