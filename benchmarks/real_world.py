"""Recordings from every version (issue 28): what share of real recordings' boundaries forkpoint prepares and
replays, before (the exact-pin rule: ``--require-verified-version``, main's behaviour) and after.

The recordings are read IN PLACE from a directory of ``<agent>/<file>`` (default /work/shared/wild-dev: real-model
recordings published in public repositories; never copied into this repository). Per recording:

* inspect: detection (no --agent), the recorded version and what forkpoint makes of it;
* prepare-only at every boundary the recording offers, with and without ``--require-verified-version``;
* replay-only (stale observations allowed, divergence only recorded) in a FRESH temporary workspace, through
  ``--sandbox bwrap`` where the adapter supports it, as a separate process with a time limit: at the last boundary
  that prepares, then bisecting down when it fails (a replay of batches 1..k is a prefix of the replay of 1..L in
  the same fresh workspace, so the boundaries up to the largest that replays are the ones that replay). Commands
  are strangers': they run only in that temporary workspace.

``--smoke`` measures two recordings derived from the project's own real-binary fixtures (version field changed
to a release forkpoint never verified), prepare-only only.

Issue 29 adds the share that replays WITHOUT ``--allow-stale-observations`` (every call re-run, or reused by design:
a sub-agent's answer after its calls re-ran) and with ``--reuse-observations GLOB`` (``--reuse``, e.g. ``'mcp__*'``:
what a user declares read-only). ``--src DIR`` runs the replays with another forkpoint tree (the before numbers:
``PYTHONPATH=DIR`` for the in-process parts too); ``--agent NAME`` measures one agent's recordings.

Issue 29's goal (>= 90 %) is measured over the boundaries whose calls need no external service: a boundary N counts
in that denominator when no call in batches 1..N reaches the web or a service forkpoint does not run here
(``EXTERNAL``: per agent, from each adapter's stale reasons; MCP servers are not configured in this benchmark).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import FIXTURES, ROOT, emit, finish_args, parser, table

from forkpoint.adapters import AGENT_NAMES, agent_spec
from forkpoint.adapters.detect import guess_agent
from forkpoint.core.errors import ReplayError
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request

WILD = Path("/work/shared/wild-dev")
REPLAY_TIMEOUT_S = 240
#: the adapters whose replays ran under bwrap (the rest: local)
BWRAP = [name for name in AGENT_NAMES if "bwrap" in agent_spec(name).sandbox_features]


#: per agent: the tool names whose calls need an external service (each adapter's stale reasons: the web, an MCP
#: server of the original run; no ``--mcp-config`` here); and a name prefix that marks an MCP tool
EXTERNAL: dict[str, frozenset[str]] = {
    "claude-code": frozenset({"WebFetch", "WebSearch"}),  # + mcp__<server>__<tool>
    "codex": frozenset({"web_search"}),  # + <server>__<tool> (Codex's MCP tool names)
    "opencode": frozenset({"webfetch", "websearch"}),  # + unknown tools (MCP/plugin: refused)
    "openhands": frozenset({"browse", "browse_interactive", "call_tool_mcp"}),
    "pi": frozenset(), "mini-swe-agent": frozenset(), "swe-agent": frozenset(),
}
EXTERNAL_PREFIX = {"claude-code": "mcp__"}


def needs_service(agent: str, call: dict[str, Any]) -> bool:
    """Whether one described call reaches the web or a service not run here (``EXTERNAL``)."""
    name = str(call.get("name") or "")
    reason = str(call.get("policy_reason") or "")
    prefix = EXTERNAL_PREFIX.get(agent)
    if name in EXTERNAL.get(agent, frozenset()) or (prefix is not None and name.startswith(prefix)):
        return True
    if agent == "codex" and "__" in name.strip("_"):
        return True
    return agent == "opencode" and "MCP or plugin tool" in reason


def first_external(agent: str, description: dict[str, Any]) -> int | None:
    """The first batch with a call that needs an external service (boundaries from it on leave the denominator)."""
    for batch in description["batches"]:
        if any(needs_service(agent, call) for call in batch.get("calls") or []):
            return int(batch["ordinal"])
    return None


def recordings(root: Path) -> list[tuple[str, Path]]:
    return [(folder.name, path) for folder in sorted(root.iterdir()) if folder.is_dir()
            for path in sorted(folder.iterdir()) if path.is_file()]


def smoke_recordings(scratch: Path) -> list[tuple[str, Path]]:
    claude = (FIXTURES / "claude_code" / "2.1.220" / "single_bash" / "session.jsonl").read_text()
    mini = (FIXTURES / "mini_swe_agent" / "1.17.5" / "basic" / "trajectory.traj.json").read_text()
    (scratch / "claude-code").mkdir()
    (scratch / "mini-swe-agent").mkdir()
    (scratch / "claude-code" / "old.jsonl").write_text(claude.replace('"version":"2.1.220"', '"version":"2.0.27"'))
    (scratch / "mini-swe-agent" / "old.traj.json").write_text(
        mini.replace('"mini_version": "1.17.5"', '"mini_version": "1.15.0"'))
    return recordings(scratch)


def boundaries(agent: str, path: Path) -> tuple[list[int], dict[str, Any]]:
    """The selectable boundaries and the inspect facts (an unreadable recording: none, with the reason)."""
    from forkpoint.run.inspection import describe

    try:
        detected = guess_agent(path)
        description = describe(path, agent)
    except ReplayError as error:
        return [], {"detected": None, "error": f"{error.kind.category}: {error.message[:120]}"}
    last = (description["after_step_range"] or [0, 0])[1]
    refused = {b["ordinal"] for b in description["batches"] if b["boundary_refusal"]}
    return [n for n in range(1, last + 1) if n not in refused], {
        "external_from": first_external(agent, description), "detected": detected,
        "version": description["recorded_version"],
        "status": description["recorded_version_status"],
        "tools_as": description.get("tool_profile") or description["tool_semantics_version"]}


def prepare(agent: str, path: Path, after: int, scratch: Path, *, strict: bool) -> bool:
    run = f"p{after}{'s' if strict else ''}"
    result = execute(build_request({
        "agent": agent, "trajectory": str(path), "after_step": after, "prepare_only": True,
        "workspace": str(scratch / "no-workspace"), "state_dir": str(scratch / "state"),
        "output_dir": str(scratch / "out"), "run_id": run, "require_verified_version": strict}, source="bench"))
    shutil.rmtree(scratch / "out" / run, ignore_errors=True)
    shutil.rmtree(scratch / "state" / run, ignore_errors=True)
    return result.failure is None


#: why the last failed replay of each recording stopped (category: first words of the message)
WHY: dict[Path, str] = {}


SRC = ROOT / "src"  # the forkpoint tree the replays run (--src)
#: --reuse: tool-name globs passed as --reuse-observations in the "reuse" measurement
REUSE: list[str] = []


def replay(agent: str, path: Path, after: int, scratch: Path, *, strict: bool,
           stale: bool = True, reuse: bool = False) -> dict[str, Any] | None:
    """One replay-only run in a fresh temporary workspace, in its own process: its result document, or None.
    ``stale``: with --allow-stale-observations; ``reuse``: with the --reuse globs."""
    spec = agent_spec(agent)
    run = f"r{after}{'s' if strict else ''}{'' if stale else 'n'}{'u' if reuse else ''}"
    workspace = Path(tempfile.mkdtemp(prefix="ws-", dir=scratch))
    argv = [sys.executable, "-m", "forkpoint.cli", "replay", "--agent", agent, "--trajectory", str(path),
            "--after-step", str(after), "--replay-only", *(["--allow-stale-observations"] if stale else []),
            *[item for glob in (REUSE if reuse else []) for item in ("--reuse-observations", glob)],
            "--on-divergence", "ignore",
            "--workspace", str(workspace), "--state-dir", str(scratch / "state"),
            "--output-dir", str(scratch / "out"), "--run-id", run, "--json",
            "--sandbox", "bwrap" if "bwrap" in spec.sandbox_features else "local",
            *(["--require-verified-version"] if strict else [])]
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=REPLAY_TIMEOUT_S, env=env, check=False,
                              cwd=scratch)
        document: dict[str, Any] | None = json.loads(done.stdout.splitlines()[-1]) if done.stdout.strip() else None
    except subprocess.TimeoutExpired:
        document = {"failure": {"category": "timeout", "message": f"over {REPLAY_TIMEOUT_S} s"}}
    except (ValueError, IndexError):
        document = None
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
        shutil.rmtree(scratch / "out" / run, ignore_errors=True)
        shutil.rmtree(scratch / "state" / run, ignore_errors=True)
    failure = (document or {}).get("failure")
    if document is None or failure:
        if not strict and stale:
            WHY[path] = (f"{failure.get('category')}: {str(failure.get('message'))[:90]}" if failure
                         else "no result")
        return None
    return document


def largest_replaying(agent: str, path: Path, prepared: list[int], scratch: Path,
                      *, strict: bool, stale: bool = True, reuse: bool = False) -> tuple[int, dict[str, Any] | None]:
    """How many of the prepared boundaries replay (bisecting from the last), and the largest replay's result."""
    if not prepared:
        return 0, None
    best = replay(agent, path, prepared[-1], scratch, strict=strict, stale=stale, reuse=reuse)
    if best is not None:
        return len(prepared), best
    low, high = 0, len(prepared) - 1  # prepared[:low] replay; prepared[high] does not
    found: dict[str, Any] | None = None
    while low < high:
        middle = (low + high) // 2
        result = replay(agent, path, prepared[middle], scratch, strict=strict, stale=stale, reuse=reuse)
        if result is not None:
            low, found = middle + 1, result
        else:
            high = middle
    return low, found


def main() -> None:
    options = parser(__doc__ or "", repeat=1)
    options.add_argument("--recordings", type=Path, default=WILD, help="a directory of <agent>/<file> recordings")
    options.add_argument("--no-replay", action="store_true", help="prepare-only only")
    options.add_argument("--src", type=Path, default=ROOT / "src", help="the forkpoint tree the replays run")
    options.add_argument("--agent", default=None, help="only this agent's recordings")
    options.add_argument("--reuse", action="append", default=[], help="--reuse-observations GLOB (repeatable)")
    args = finish_args(options.parse_args())
    global SRC
    SRC = args.src
    REUSE[:] = args.reuse
    with tempfile.TemporaryDirectory(prefix="fp-real-world-") as temp:
        scratch = Path(temp)
        if args.smoke:
            (scratch / "rec").mkdir()
            found = smoke_recordings(scratch / "rec")
        else:
            found = [(agent, path) for agent, path in recordings(args.recordings)
                     if args.agent in (None, agent)]
        per_agent: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        rows = []
        for agent, path in found:
            offered, facts = boundaries(agent, path)
            before = [n for n in offered if prepare(agent, path, n, scratch, strict=True)]
            after = [n for n in offered if prepare(agent, path, n, scratch, strict=False)]
            replayed_before = replayed_after = no_stale = reused = 0
            exact = ""
            if not (args.smoke or args.no_replay):
                replayed_before, _ = largest_replaying(agent, path, before, scratch, strict=True)
                replayed_after, best = largest_replaying(agent, path, after, scratch, strict=False)
                no_stale, _ = largest_replaying(agent, path, after, scratch, strict=False, stale=False)
                if REUSE:
                    reused, _ = largest_replaying(agent, path, after, scratch, strict=False, stale=False, reuse=True)
                if best is not None:
                    meta = best.get("metadata") or {}
                    exact = f"{meta.get('exact_observations')}/{meta.get('compared_observations')}"
            totals = per_agent[agent]
            totals["recordings"] += 1
            totals["boundaries"] += len(offered)
            totals["prepare_before"] += len(before)
            totals["prepare_after"] += len(after)
            totals["replay_before"] += replayed_before
            totals["replay_after"] += replayed_after
            totals["replay_no_stale"] += no_stale
            totals["replay_reuse"] += reused
            limit = facts.get("external_from") or (max(offered, default=0) + 1)
            clean = [n for n in offered if n < limit]
            totals["offline_boundaries"] += len(clean)
            totals["offline_no_stale"] += sum(1 for n in after[:no_stale] if n < limit)
            rows.append((f"{agent}/{path.name}", facts.get("detected") or "—",
                         facts.get("version") or "—",
                         facts.get("status") or str(facts.get("error", "—")).replace("|", "/"),
                         facts.get("tools_as") or "—", len(offered), f"{len(before)} → {len(after)}",
                         "—" if args.smoke or args.no_replay else f"{replayed_before} → {replayed_after}",
                         "—" if args.smoke or args.no_replay else str(no_stale),
                         "—" if args.smoke or args.no_replay else
                         f"{sum(1 for n in after[:no_stale] if n < limit)} of {len(clean)}",
                         "—" if args.smoke or args.no_replay or not REUSE else str(reused),
                         exact or "—", WHY.get(path, "—").replace("|", "/")))
        summary = []
        for agent, totals in sorted(per_agent.items()):
            total = totals["boundaries"] or 1
            summary.append((agent, totals["recordings"], totals["boundaries"],
                            f"{totals['prepare_before'] / total:.0%} → {totals['prepare_after'] / total:.0%}",
                            "—" if args.smoke or args.no_replay else
                            f"{totals['replay_before'] / total:.0%} → {totals['replay_after'] / total:.0%}",
                            "—" if args.smoke or args.no_replay else f"{totals['replay_no_stale'] / total:.0%}",
                            "—" if args.smoke or args.no_replay or not totals["offline_boundaries"] else
                            f"{totals['offline_no_stale'] / totals['offline_boundaries']:.0%} "
                            f"({totals['offline_no_stale']} of {totals['offline_boundaries']})",
                            "—" if args.smoke or args.no_replay or not REUSE else
                            f"{totals['replay_reuse'] / total:.0%}"))
    body = (
        "Before = main's exact-pin rule (`--require-verified-version`); after = any readable version, marked "
        "degraded (`unverified_version`). Replay-only ran in a fresh temporary workspace (bwrap for every "
        "adapter that supports it: " + ", ".join(sorted(BWRAP))
        + "), stale observations allowed; the recordings come without their workspaces, so observations "
        "that read the original project differ — exact is the largest replay's exact / compared observations. "
        "Without stale, over boundaries whose calls need no external service: a boundary N is in the denominator "
        "when no call in batches 1..N needs the web or a service not run here (issue 29's ≥ 90 % goal). Those "
        "calls, per agent: " + "; ".join(
            f"{agent} {', '.join(sorted(names)) or 'none'}" for agent, names in sorted(EXTERNAL.items()))
        + "; plus MCP tools (claude-code `mcp__*`, codex `<server>__<tool>`, opencode's unknown MCP/plugin tools); "
        "no `--mcp-config` is given.\n\n"
        + table(("agent", "recordings", "boundaries", "prepare-only before → after", "replay-only before → after",
                 "replay-only without stale", "… over boundaries needing no external service",
                 f"… with --reuse-observations {' '.join(REUSE) or '(none)'}"), summary)
        + "\n\n"
        + table(("recording", "detected", "recorded version", "status", "tools as", "boundaries",
                 "prepare before → after", "replay before → after", "without stale",
                 "without stale (no service)", "with reuse",
                 "exact (largest replay)",
                 "why a replay stopped (after)"), rows)
    )
    emit("real_world", "Real-world recordings: prepare and replay by version (issue 28)", body, args,
         command="python benchmarks/real_world.py --recordings /work/shared/wild-dev")


if __name__ == "__main__":
    main()
