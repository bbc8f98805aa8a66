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

``--smoke`` runs prepare-only on two fixtures, nothing else.
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


def main() -> None:
    options = parser(__doc__ or "", repeat=1)
    options.add_argument("--recordings", type=Path, default=WILD, help="a directory of <agent>/<file> recordings")
    options.add_argument("--calibrations", type=Path, default=calibration.root(),
                         help="the calibration store whose probe recordings are measured")
    options.add_argument("--no-continue", action="store_true", help="prepare-only and replay-only only")
    options.add_argument("--calibrate", action="append", default=[], metavar="AGENT@VERSION",
                         help="calibrate this release into the store first, timed (repeatable)")
    args = finish_args(options.parse_args())
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
    emit("versions", "Version matrix: recorded × continuing version (issue 28)", body, args,
         command="python benchmarks/versions.py --recordings /work/shared/wild-dev --calibrations <store>")


if __name__ == "__main__":
    main()
