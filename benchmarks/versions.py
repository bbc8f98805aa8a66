"""The version matrix (issue 28): recorded version × continuing version — prepare-only, replay-only exact share,
and the continuation gate — over recordings made by many releases, and which releases calibrate.

Recordings, all read IN PLACE (never copied into the repository):

* ``fixture``: one scenario per verified version (tests/fixtures, the project's real-binary recordings), replayed
  in its restored initial workspace at the recorded cwd;
* ``probe``: the native recording each calibration made with a real release (``<store>/<agent>/<version>.probe``
  or ``.failed-probe``; the store is ``--calibrations``, default the user's), replayed in the probe's initial
  files in a fresh directory (recorded absolute paths point at the calibration's removed scratch dir, so calls
  naming them are not exact);
* ``wild``: real-model recordings from public repositories (``--recordings``, default /work/shared/wild-dev),
  which come without their workspaces: replayed in an empty one, stale observations allowed.

Per recording: the version facts (``inspect``), the share of boundaries that prepare, a replay-only of the last
boundary that prepares (exact / compared observations), and for every verified version of the agent a
continuation after batch 1 through the bridge with ``--upstream stub`` (no model): ``validated`` (the gate
accepted the continuing binary's first request), ``refused`` (the gate named the difference) or the refusal
before anything ran (a pair not proven). Commands of strangers run only in temporary workspaces (through
``--sandbox bwrap`` where the adapter supports it), one process per run with a time limit.

``--calibrate AGENT@VERSION`` (repeatable) first calibrates those releases into the measured store (installing
them), timed: the calibrations too slow for CI (OpenCode's, about 50 s each) are measured here, e.g.
``--calibrate opencode@1.2.6`` (calibrated as 1.17.11 with the 1.2 tool profile named), and the Python agents'
matrix (minutes each: ``--calibrate openhands-sdk@1.58.0 --calibrate openhands@0.60.0``).

``--sweep`` is the release sweep instead (benchmarks/_sweep.py): every release of the last 6 months of the npm
agents — Claude Code, Codex, OpenCode, Pi, Gemini CLI, Qwen Code, Copilot CLI — and a spread sample of 8 of
mini-swe-agent, OpenHands and the OpenHands SDK (PyPI: large installs, minutes per calibration) (``--since``,
``--agent``; ``--sample N`` per agent) installed and calibrated, one at a time under ``--deadline``, into a separate
store (``--calibrations``, default a temp dir; never the user's store), resumable; its table replaces the "Release
sweep" section. Gemini CLI, Qwen Code and Copilot CLI were swept with ``--since 2025-12-05 --sample 7`` (12
months), the PyPI agents with ``--since 2025-12-05``. ``--until DATE`` sweeps an earlier window instead (releases
published before DATE, e.g. ``--since 2025-12-05 --until 2026-06-05``: the older half of the last 12 months),
whose table is a section of its own ("Release sweep, older window").

``--smoke`` runs prepare-only on two fixtures, and the sweep's choice of releases from a canned registry answer,
nothing else.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _sweep
from _common import FIXTURES, ROOT, emit, finish_args, parser, table

from forkpoint.adapters import agent_spec, calibration
from forkpoint.bridge.server import REFUSED
from forkpoint.core.errors import ReplayError
from forkpoint.run.engine import execute
from forkpoint.run.request import build_request

WILD = Path("/work/shared/wild-dev")
RUN_TIMEOUT_S = 300
#: agent -> (fixture folder, native file of a fixture, scenario measured)
FIXTURE_FILES = {"claude-code": ("claude_code", "session.jsonl", "parallel"),
                 "codex": ("codex", "rollout.jsonl", "parallel"),
                 "opencode": ("opencode", "export.json", "parallel"),
                 "pi": ("pi", "session.jsonl", "parallel"),
                 "mini-swe-agent": ("mini_swe_agent", "trajectory.traj.json", "basic"),
                 "gemini-cli": ("gemini_cli", "session.jsonl", "tools"),
                 "qwen-code": ("qwen_code", "session.jsonl", "tools"),
                 "copilot-cli": ("copilot_cli", "session.jsonl", "tools")}
#: agent -> the native file a calibration probe keeps, and the module whose FILES seed its workspace
PROBE_FILES = {"claude-code": ("session.jsonl", "forkpoint.adapters.claude_code.calibrate"),
               "codex": ("rollout.jsonl", "forkpoint.adapters.codex.calibrate"),
               "opencode": ("export.json", "forkpoint.adapters.opencode.calibrate"),
               "pi": ("session.jsonl", "forkpoint.adapters.pi.calibrate"),
               "mini-swe-agent": ("trajectory.traj.json", "forkpoint.adapters.mini_swe_agent.calibrate"),
               "gemini-cli": ("session.jsonl", "forkpoint.adapters.gemini_cli.calibrate"),
               "qwen-code": ("session.jsonl", "forkpoint.adapters.qwen_code.calibrate"),
               "copilot-cli": ("session.jsonl", "forkpoint.adapters.copilot_cli.calibrate"),
               "openhands": ("trajectory.json", "forkpoint.adapters.openhands.calibrate"),
               "openhands-sdk": ("conversation.json", "forkpoint.adapters.openhands_sdk.calibrate")}



def fixture_recordings() -> list[tuple[str, str, Path, Path | None]]:
    """(agent, source, native file, fixture folder) for one scenario of every verified version recorded."""
    found = []
    for agent, (folder, name, scenario) in FIXTURE_FILES.items():
        for version in agent_spec(agent).versions:
            fixture = FIXTURES / folder / version / scenario
            if (fixture / name).is_file():
                found.append((agent, "fixture", fixture / name, fixture))
    return found


def probe_recordings(store: Path) -> list[tuple[str, str, Path, Path | None]]:
    found = []
    for agent, (name, _) in PROBE_FILES.items():
        folder = store / agent
        probes = sorted(folder.glob("*.probe")) if folder.is_dir() else []
        # a failed probe of a version that later calibrated is superseded by its successful one
        probes += [f for f in sorted(folder.glob("*.failed-probe")) if folder.is_dir()
                   and not (folder / f.name.replace(".failed-probe", ".probe")).is_dir()]
        for probe in probes:
            if (probe / name).is_file() and not (probe / name).is_symlink():
                found.append((agent, "probe", probe / name, None))
    return found


def wild_recordings(root: Path) -> list[tuple[str, str, Path, Path | None]]:
    if not root.is_dir():
        return []
    return [(folder.name, "wild", path, None) for folder in sorted(root.iterdir())
            if folder.is_dir() and folder.name in FIXTURE_FILES for path in sorted(folder.iterdir()) if path.is_file()]


@contextmanager
def workspace_for(agent: str, source: str, fixture: Path | None, scratch: Path,
                  path: Path) -> Iterator[Path]:
    """A fresh workspace: a fixture's initial files at its recorded cwd, a probe's files, or an empty folder."""
    if fixture is not None:
        from forkpoint.testing.recordings import restored_workspace

        with restored_workspace(fixture) as cwd:
            yield cwd
        return
    recorded = recorded_cwd(agent, path) if source == "probe" else None
    if recorded is not None and recorded.parent.name.startswith("forkpoint-calibrate-") \
            and recorded.parent.parent == Path(tempfile.gettempdir()) and not recorded.parent.exists():
        # the probe ran in the calibration's scratch dir (removed since): recreated there for the run only
        folder = recorded
        folder.mkdir(parents=True)
        owned = recorded.parent
    else:
        folder = owned = Path(tempfile.mkdtemp(prefix="ws-", dir=scratch))
    try:
        if source == "probe":
            import importlib

            files: dict[str, str] = importlib.import_module(PROBE_FILES[agent][1]).FILES
            for rel, content in files.items():
                (folder / rel).parent.mkdir(parents=True, exist_ok=True)
                (folder / rel).write_text(content, "utf-8")
        yield folder
    finally:
        shutil.rmtree(owned, ignore_errors=True)


def recorded_cwd(agent: str, path: Path) -> Path | None:
    from forkpoint.adapters import get_adapter

    try:
        cwd = get_adapter(agent).parse(path).cwd
    except ReplayError:
        return None
    return Path(cwd) if cwd else None


def facts(agent: str, path: Path) -> tuple[list[int], dict[str, Any]]:
    from forkpoint.run.inspection import describe

    try:
        description = describe(path, agent)
    except ReplayError as error:
        return [], {"error": f"{error.kind.category}: {error.message[:100]}"}
    last = (description["after_step_range"] or [0, 0])[1]
    refused = {b["ordinal"] for b in description["batches"] if b["boundary_refusal"]}
    return [n for n in range(1, last + 1) if n not in refused], {
        "version": description["recorded_version"], "status": description["recorded_version_status"],
        "tools_as": description["tool_semantics_version"]}


def prepares(agent: str, path: Path, after: int, scratch: Path) -> bool:
    run = f"p{after}"
    result = execute(build_request({
        "agent": agent, "trajectory": str(path), "after_step": after, "prepare_only": True,
        "workspace": str(scratch / "no-workspace"), "state_dir": str(scratch / "state"),
        "output_dir": str(scratch / "out"), "run_id": run}, source="bench"))
    shutil.rmtree(scratch / "out" / run, ignore_errors=True)
    shutil.rmtree(scratch / "state" / run, ignore_errors=True)
    return result.failure is None


def run_cli(agent: str, path: Path, after: int, workspace: Path, scratch: Path, run: str,
            extra: list[str]) -> dict[str, Any]:
    """One ``forkpoint replay`` in its own process: its result document (or a failure of our own making)."""
    spec = agent_spec(agent)
    argv = [sys.executable, "-m", "forkpoint.cli", "replay", "--agent", agent, "--trajectory", str(path),
            "--after-step", str(after), "--allow-stale-observations", "--on-divergence", "ignore",
            "--workspace", str(workspace), "--state-dir", str(scratch / "state"),
            "--output-dir", str(scratch / "out"), "--run-id", run, "--json",
            "--sandbox", "bwrap" if "bwrap" in spec.sandbox_features else "local", *extra]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, env=env, check=False,
                              cwd=scratch)
        document: dict[str, Any] = json.loads(done.stdout.splitlines()[-1]) if done.stdout.strip() else {
            "failure": {"category": "no_result", "message": done.stderr[-200:]}}
    except subprocess.TimeoutExpired:
        document = {"failure": {"category": "timeout", "message": f"over {RUN_TIMEOUT_S} s"}}
    except (ValueError, IndexError):
        document = {"failure": {"category": "no_result", "message": "unreadable output"}}
    finally:
        shutil.rmtree(scratch / "out" / run, ignore_errors=True)
        shutil.rmtree(scratch / "state" / run, ignore_errors=True)
    return document


def gate_cell(document: dict[str, Any]) -> str:
    bridge = (document.get("metadata") or {}).get("model_bridge") or {}
    failure = document.get("failure") or {}
    if bridge.get("validated", 0) >= 1 and bridge.get("refused", 0) == 0 and not bridge.get("failed"):
        return "validated"
    if bridge.get("refused") or bridge.get("failed") or str(failure.get("message", "")).startswith(REFUSED):
        return f"refused: {str(failure.get('message', '')).removeprefix(REFUSED).strip()[:90]}"
    return f"{failure.get('category', '?')}: {str(failure.get('message', ''))[:70]}"


def calibrations(timed: dict[tuple[str, str], float] | None = None) -> list[tuple[str, str, str, str]]:
    """Every calibration in the store (``FORKPOINT_CALIBRATIONS``, set by main); ``timed``: the wall time of the
    ones this run calibrated (``--calibrate``)."""
    timed = timed or {}
    return [(agent, version, status, " ".join(detail.split())[:120].replace("|", "/")
             + (f" ({timed[agent, version]:.0f} s, this run)" if (agent, version) in timed else ""))
            for agent in PROBE_FILES for version, status, detail in calibration.listed(agent_spec(agent))]


#: a registry answer the smoke chooses from (``npm view`` shape: version -> publish time; a pre-release and a
#: backfill among them)
CANNED_TIMES = {"created": "2025-01-01T00:00:00Z", "1.0.0": "2025-12-01T00:00:00Z", "1.1.0": "2026-06-10T00:00:00Z",
                "1.1.1": "2026-07-01T00:00:00Z", "1.2.0": "2026-08-01T00:00:00Z", "1.2.1-beta": "2026-08-02T00:00:00Z",
                "0.9.9": "2026-08-03T00:00:00Z", "1.2.1": "2026-09-01T00:00:00Z", "1.3.0": "2026-11-01T00:00:00Z"}


def sweep_section(args: Any) -> None:
    """``--sweep``: calibrate the chosen releases into the sweep's own store, then write the section."""
    from datetime import UTC, datetime

    store = args.calibrations or Path(tempfile.gettempdir()) / "forkpoint-release-sweep"
    if store.resolve() == calibration.root().resolve() and "FORKPOINT_CALIBRATIONS" not in os.environ:
        raise SystemExit("--sweep never writes the user's calibration store: name another --calibrations")
    since = datetime.fromisoformat(args.since).replace(tzinfo=UTC) if args.since else _sweep.default_since()
    until = datetime.fromisoformat(args.until).replace(tzinfo=UTC) if args.until else None
    if until is not None and until <= since:
        raise SystemExit(f"--until {args.until} is not after --since {since:%Y-%m-%d}")
    span = f"since {since:%Y-%m-%d}" + (f" and before {until:%Y-%m-%d}" if until else "")
    agents = args.agent or list(_sweep.SWEPT)
    if args.runtimes:
        os.environ["FORKPOINT_RUNTIMES"] = str(args.runtimes)  # the workers inherit it
    os.nice(max(0, 10 - os.nice(0)))  # shared machine: below the interactive work
    progress = store / "sweep.log"
    store.mkdir(parents=True, exist_ok=True)

    def say(line: str) -> None:
        stamped = f"{datetime.now(UTC):%H:%M:%S} {line}"
        print(stamped, file=sys.stderr, flush=True)
        with progress.open("a", encoding="utf-8") as handle:
            handle.write(stamped + "\n")

    chosen, windows, backfills, published = _sweep.sweep(agents, since, args.sample, store, args.deadline,
                                                         Path(__file__).resolve(), say, run=not args.list_only,
                                                         prune=args.prune_installs, retry=args.retry_unnamed,
                                                         until=until)
    records = _sweep.rows(chosen, windows, store)
    counts = []
    for agent in chosen:
        kinds = [_sweep.classify(r)[0] for r in records if r["agent"] == agent]
        counts.append((agent, len(windows[agent]), len(kinds), *(kinds.count(k) for k in _sweep.CLASSES),
                       len(backfills[agent])))
    body = (
        f"Releases published {span} (`npm view <package> time`; for a PyPI agent the first upload "
        "of each release's files, from `https://pypi.org/pypi/<package>/json`, yanked releases and pre-releases left "
        "out), "
        + (f"a spread sample of {args.sample} per agent" if args.sample else
           f"every one of an npm agent's, a spread sample of {_sweep.PYPI_SAMPLE} of a PyPI agent's")
        + " (a sample: newest, oldest, every minor line's last release when they fit, the rest spread in time; plus "
        "every other release of the window already swept into the same store: the sweep is resumable)"
        + "; a backfill (a release published after a higher one: a re-publish or a mirror catching up) is left out. "
        "Each release installed into the runtime cache and calibrated (`forkpoint agents calibrate`, ScriptedModel) "
        f"into a separate store, one at a time, {args.deadline:g} s deadline each. `named`: failed, the report's "
        "first failing check names the difference; `unnamed`: failed without one (a forkpoint bug to fix).\n\n"
        + table(("agent", "releases in window", "swept", *_sweep.CLASSES, "backfills left out"), counts)
        + "\n\n"
        + table(("agent", "release", "published", "installs", "result", "as / first difference", "wall s"),
                [(r["agent"], r["version"], published[r["agent"]].get(r["version"], "?"),
                  {"not-installed": "no", "pending": "—", "verified": "yes"}.get(_sweep.classify(r)[0], "yes"),
                  _sweep.classify(r)[0], " ".join(_sweep.classify(r)[1].split())[:260].replace("|", "/"),
                  r.get("wall_s", "—")) for r in records])
    )
    title = (f"Release sweep: calibrating every release since {since:%Y-%m-%d} (issue 28)" if until is None else
             f"Release sweep, older window: releases published {since:%Y-%m-%d} to before {until:%Y-%m-%d} "
             "(issue 28)")
    emit("versions_sweep" if until is None else "versions_sweep_older", title, body,
         args, command="nice -n 10 python benchmarks/versions.py --sweep"
         + (f" --sample {args.sample}" if args.sample else "") + f" --since {since:%Y-%m-%d}"
         + (f" --until {until:%Y-%m-%d}" if until else "")
         + "".join(f" --agent {a}" for a in args.agent or ()))


def smoke_sweep() -> str:
    """The sweep's choice from a canned registry answer (nothing listed, installed or run)."""
    from datetime import UTC, datetime

    since = datetime(2026, 6, 5, tzinfo=UTC)
    window, backfills = _sweep.releases_in_window(CANNED_TIMES, since)
    return table(("window", "backfills", "sample 3"), [(" ".join(window), " ".join(backfills),
                                                        " ".join(_sweep.choose_releases(CANNED_TIMES, since, 3)))])


def main() -> None:
    if sys.argv[1:2] == ["--sweep-one"] and len(sys.argv) in (3, 4):
        print(json.dumps(_sweep.worker(sys.argv[2], prune=sys.argv[3:] == ["--prune"])), flush=True)
        return
    options = parser(__doc__ or "", repeat=1)
    options.add_argument("--recordings", type=Path, default=WILD, help="a directory of <agent>/<file> recordings")
    options.add_argument("--calibrations", type=Path, default=None,
                         help="the calibration store whose probe recordings are measured (default: the user's); "
                              "with --sweep, the store it calibrates into (default: a dir under $TMPDIR)")
    options.add_argument("--no-continue", action="store_true", help="prepare-only and replay-only only")
    options.add_argument("--calibrate", action="append", default=[], metavar="AGENT@VERSION",
                         help="calibrate this release into the store first, timed (repeatable)")
    options.add_argument("--sweep", action="store_true", help="the release sweep instead of the matrix")
    options.add_argument("--agent", action="append", choices=_sweep.SWEPT, help="sweep only this agent (repeat)")
    options.add_argument("--since", help="sweep releases published since this date (default: 6 months ago)")
    options.add_argument("--until", help="sweep releases published before this date (default: no end)")
    options.add_argument("--sample", type=int, default=None, help="sweep N releases per agent, spread "
                         f"(default: every release of an npm agent, {_sweep.PYPI_SAMPLE} of a PyPI agent)")
    options.add_argument("--deadline", type=float, default=_sweep.DEADLINE_S, help="seconds per release")
    options.add_argument("--list-only", action="store_true", help="list and choose releases; calibrate nothing")
    options.add_argument("--retry-unnamed", action="store_true", help="run again the releases that failed unnamed")
    options.add_argument("--runtimes", type=Path, help="the runtime cache the sweep installs into "
                         "(default: forkpoint's, $FORKPOINT_RUNTIMES)")
    options.add_argument("--prune-installs", action="store_true",
                         help="remove each release the sweep installed once calibrated (a full sweep: ~350 MB each)")
    args = finish_args(options.parse_args())
    if args.sweep and not args.smoke:
        sweep_section(args)
        return
    if args.calibrations is None:
        args.calibrations = calibration.root()
    # the runs (and their subprocesses) read recordings of the store's calibrated versions as calibrated
    os.environ["FORKPOINT_CALIBRATIONS"] = str(args.calibrations)
    timed: dict[tuple[str, str], float] = {}
    for target in [] if args.smoke else args.calibrate:
        from forkpoint.adapters.calibrate import calibrate

        started = time.monotonic()
        outcome = calibrate(target)
        timed[outcome.agent, outcome.version] = time.monotonic() - started
        print(outcome.report(), file=sys.stderr, flush=True)
    found = fixture_recordings()
    if args.smoke:
        found = found[:2]
    else:
        found += probe_recordings(args.calibrations) + wild_recordings(args.recordings)
    rows = []
    with tempfile.TemporaryDirectory(prefix="fp-versions-") as temp:
        scratch = Path(temp)
        for agent, source, path, fixture in found:
            offered, known = facts(agent, path)
            prepared = [n for n in offered if prepares(agent, path, n, scratch)]
            exact = "—"
            gates: list[str] = []
            if prepared and not args.smoke:
                with workspace_for(agent, source, fixture, scratch, path) as workspace:
                    replayed = run_cli(agent, path, prepared[-1], workspace, scratch, "replay", ["--replay-only"])
                meta = replayed.get("metadata") or {}
                exact = (f"{meta.get('exact_observations')}/{meta.get('compared_observations')}"
                         if not replayed.get("failure") else
                         f"{replayed['failure'].get('category')}: {str(replayed['failure'].get('message'))[:60]}")
                if not args.no_continue and agent_spec(agent).continues:
                    for version in agent_spec(agent).versions:
                        with workspace_for(agent, source, fixture, scratch, path) as workspace:
                            document = run_cli(agent, path, 1, workspace, scratch, f"c{version.replace('.', '_')}",
                                               ["--upstream", "stub", "--agent-version", version])
                        gates.append(f"{version}: {gate_cell(document)}")
            label = {"probe": path.parent.name, "fixture": f"{path.parent.parent.name}/{path.parent.name}"}.get(
                source, path.name)
            rows.append((agent, f"{source}: {label}", known.get("version") or "—",
                         known.get("status") or str(known.get("error", "—")), known.get("tools_as") or "—",
                         f"{len(prepared)}/{len(offered)}", exact.replace("|", "/"),
                         "<br>".join(g.replace("|", "/") for g in gates) or "—"))
            print(" | ".join(map(str, rows[-1])), file=sys.stderr, flush=True)
    body = (
        "Recorded version (rows) × continuing version (the last column: a continuation after batch 1 with "
        "`--agent-version V --upstream stub`, so only the gate's verdict on the continuing binary's first request "
        "is measured). Prepare = boundaries that prepare / boundaries offered; replay-only exact = exact / compared "
        "observations of the last boundary that prepares (stale observations allowed; `wild` recordings come "
        "without their workspace, so calls that read the original project differ; `probe` recordings name the "
        "calibration's removed scratch dir in absolute paths).\n\n"
        + table(("agent", "recording", "recorded version", "status", "tools as", "prepare", "replay-only exact",
                 "continue after batch 1, by version"), rows)
        + "\n\nCalibrations in the measured store (`forkpoint agents calibrate`, real releases, ScriptedModel):\n\n"
        + table(("agent", "release", "result", "detail"), calibrations(timed) or [("—",) * 4])
    )
    if args.smoke:
        body += "\n\nRelease sweep's choice from a canned registry answer (since 2026-06-05):\n\n" + smoke_sweep()
    emit("versions", "Version matrix: recorded × continuing version (issue 28)", body, args,
         command="python benchmarks/versions.py --recordings /work/shared/wild-dev --calibrations <store>")


if __name__ == "__main__":
    main()
