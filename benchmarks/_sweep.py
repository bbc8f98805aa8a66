"""The release sweep of benchmarks/versions.py (issue 28): calibrate the releases of each agent published in a
window (default: the last 6 months; ``until``: an earlier window, e.g. the 6 months before those), one at a time,
into a SEPARATE calibration store, and classify each.

* :func:`releases_in_window` and :func:`choose_releases` are pure (unit tested, and all the smoke runs): from the
  registry's ``npm view <package> time --json`` answer, which releases are in the window and which a sample of N
  keeps; :func:`pypi_release_times` is the same answer made from PyPI's JSON API (a PyPI agent's releases);
* :func:`sweep` lists each agent's releases (``npm view``, or ``https://pypi.org/pypi/<package>/json``), then for
  each chosen release runs one worker process
  (``versions.py --sweep-one AGENT@VERSION``: install into the runtime cache, then ``forkpoint agents calibrate``)
  under a deadline, killed with its process group past it. The store is resumable: a release with a profile, a
  failure marker or a line in ``<store>/sweep.jsonl`` is not run again.

A release is classified (:func:`classify`) as ``calibrated`` (as which verified profile), ``named`` (failed, and
the first failing check of its report names the difference: the parser's reading, an observation that differs,
the gate's refusal, a ``record`` failure that starts ``release difference:`` — an option of forkpoint's command
the release has not got, a GitHub login it asks for, a proxy it uses for loopback), ``unnamed`` (failed without a
named difference: the probe did not complete, the worker crashed or timed out, forkpoint's install code failed on an
installed package — a forkpoint bug to look at), ``not-installed`` (the registry or npm could not give the release),
or ``verified`` (a shipped version: not calibrated).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

#: the agents swept: every npm agent (issue 28: the last 6 months of the first four, 12 of the next three), then the
#: PyPI ones
SWEPT = ("claude-code", "codex", "opencode", "pi", "gemini-cli", "qwen-code", "copilot-cli",
         "mini-swe-agent", "openhands-sdk", "openhands")
#: a PyPI agent's sample when none is asked for: each install is a large venv (OpenHands ~1 GB) and each
#: calibration takes minutes, so a sweep of every release is asked for explicitly (``--sample`` above the window)
PYPI_SAMPLE = 8
#: a plain release: pre-releases and Codex's per-platform ``0.101.0-linux-x64`` packages are not releases
_RELEASE = re.compile(r"^(\d{1,9})\.(\d{1,9})\.(\d{1,9})$")
#: the classes of a release, in the order the counts table shows them
CLASSES = ("verified", "calibrated", "named", "unnamed", "not-installed", "pending")
#: failing checks whose detail names the difference (anything else is not a named difference); ``release``: the
#: release is not the agent the probe drives (an openhands-ai without V0's agent loop)
NAMED_CHECKS = ("release", "parse", "tool_observations", "resume_envelope")
#: a ``record`` check whose detail starts so names the release's difference (kit.calibration.RELEASE_DIFFERENCE)
NAMED_RECORD = "release difference: "
#: details of a failing check that name no difference: the check itself could not run
NOT_NAMED = ("not continued:", "the release made no request", "replay failed:")
#: an install failure forkpoint's own code raised (the package installed, forkpoint could not find its binary):
#: a forkpoint bug, not a release the registry cannot give (Codex 0.130.0's per-platform package holds
#: ``vendor/<triple>/codex/codex``, not the ``bin/codex`` the spec looked for)
INSTALL_BUG = "internal_error:"
#: ... unless npm installed no package for this platform at all: the registry has no build of it (Codex 0.142.1's
#: ``linux-x64``), which is "not installed"
NO_BUILD = re.compile(r"expected one installed native package for \S+ among .*; found none$")
DEADLINE_S = 1200.0
NPM_VIEW_TIMEOUT_S = 120.0
PYPI_JSON = "https://pypi.org/pypi/{package}/json"
PYPI_TIMEOUT_S = 60.0
#: the JSON API's answer is read up to this (openhands-ai's is ~180 kB)
PYPI_MAX_BYTES = 16 << 20
RESULTS = "sweep.jsonl"


def _number(version: str) -> tuple[int, int, int] | None:
    match = _RELEASE.fullmatch(version)
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def _when(stamp: object) -> datetime | None:
    if not isinstance(stamp, str):
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def releases_in_window(times: Mapping[str, object], since: datetime,
                       until: datetime | None = None) -> tuple[list[str], list[str]]:
    """(releases published at or after ``since`` and before ``until``, oldest first; backfills in the window).

    ``until`` is exclusive, so ``[A, B)`` and ``[B, ...)`` split the releases exactly: no release is in both
    windows or in neither. Whether a release is a backfill depends on every release before it, in the window or not.

    A backfill is a release published (by the registry's clock) after a higher one: a re-publish or a mirror
    catching up on an old line (the registry here dates Claude Code 0.2.29 to July 2026), not a release of that
    period; it is reported, never swept."""
    dated = sorted((when, number, version) for version, stamp in times.items()
                   if (number := _number(version)) is not None and (when := _when(stamp)) is not None)
    highest: tuple[int, int, int] | None = None
    window: list[str] = []
    backfills: list[str] = []
    for when, number, version in dated:
        backfill = highest is not None and number < highest
        if not backfill:
            highest = number
        if when >= since and (until is None or when < until):
            (backfills if backfill else window).append(version)
    return window, backfills


def _spread(pool: list[str], chosen: list[str], count: int, at: Mapping[str, float]) -> list[str]:
    """``chosen`` plus up to ``count`` more of ``pool``, each the one farthest in time from those chosen so far
    (ties: the newer)."""
    picked = list(chosen)
    for _ in range(count):
        left = [v for v in pool if v not in picked]
        if not left:
            break
        picked.append(max(left, key=lambda v: (min((abs(at[v] - at[c]) for c in picked), default=0.0), at[v])))
    return picked


def choose_releases(times: Mapping[str, object], since: datetime, sample: int | None,
                    until: datetime | None = None) -> list[str]:
    """The releases a sweep calibrates, oldest first: every release in the window, or (``sample``) N of them —
    the newest and the oldest, every minor line's last release (when they fit in N; else N of those lines,
    spread), the rest evenly spread in time."""
    window, _ = releases_in_window(times, since, until)
    if sample is None or sample >= len(window):
        return window
    if sample <= 0:
        return []
    at = {v: when.timestamp() for v in window if (when := _when(times[v])) is not None}
    lasts: dict[tuple[int, int], str] = {}
    for version in window:  # oldest first: the last one seen of a line is its last release
        number = _number(version)
        assert number is not None
        lasts[number[:2]] = version
    ends = [window[-1]] if sample == 1 else [window[-1], window[0]]
    lines = [v for v in lasts.values() if v not in ends]
    if len(ends) + len(lines) <= sample:
        picked = _spread(window, ends + lines, sample - len(ends) - len(lines), at)
    else:
        picked = _spread(lines, ends, sample - len(ends), at)
    return [v for v in window if v in picked]


def default_since(today: datetime | None = None) -> datetime:
    """Six months (183 days) before today, at midnight UTC."""
    day = (today or datetime.now(UTC)).astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=183)


def npm_times(package: str) -> dict[str, object]:
    """``npm view PACKAGE time --json``: version -> publish time (plus ``created``/``modified``)."""
    done = subprocess.run(["npm", "view", package, "time", "--json"], capture_output=True, text=True,
                          timeout=NPM_VIEW_TIMEOUT_S, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"npm view {package} time: exit {done.returncode}: {done.stderr[-300:]}")
    data = json.loads(done.stdout)
    if not isinstance(data, dict):
        raise RuntimeError(f"npm view {package} time: not an object")
    return data


def pypi_release_times(answer: Mapping[str, object]) -> dict[str, object]:
    """PyPI's JSON API answer (``releases``: version -> its files) as ``npm view``'s ``time``: version -> the
    first upload of its files. A release whose files are all yanked, or that has none, has no date (never swept);
    pre-releases (``2.0.0a1``) stay in and ``releases_in_window`` leaves them out."""
    releases = answer.get("releases")
    if not isinstance(releases, Mapping):
        raise RuntimeError("the PyPI answer has no 'releases' object")
    times: dict[str, object] = {}
    for version, files in releases.items():
        stamps = sorted(f["upload_time_iso_8601"] for f in files if isinstance(f, Mapping)
                        and not f.get("yanked") and isinstance(f.get("upload_time_iso_8601"), str)) \
            if isinstance(files, list) else []
        if isinstance(version, str) and stamps and _when(stamps[0]) is not None:
            times[version] = stamps[0]
    return times


def pypi_times(package: str) -> dict[str, object]:
    """The release times of a PyPI distribution (:func:`pypi_release_times` of its JSON API answer)."""
    import urllib.request

    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}", package):
        raise RuntimeError(f"not a distribution name: {package!r}")
    request = urllib.request.Request(PYPI_JSON.format(package=package), headers={"Accept": "application/json"})
    with urllib.request.urlopen(request, timeout=PYPI_TIMEOUT_S) as answer:
        body = answer.read(PYPI_MAX_BYTES + 1)
    if len(body) > PYPI_MAX_BYTES:
        raise RuntimeError(f"PyPI's answer for {package} is over {PYPI_MAX_BYTES} bytes")
    data = json.loads(body)
    if not isinstance(data, dict):
        raise RuntimeError(f"PyPI's answer for {package}: not an object")
    return pypi_release_times(data)


def registry_times(agent: str) -> dict[str, object]:
    """The agent's release times from its own registry (npm or PyPI)."""
    from forkpoint.adapters import agent_spec
    from forkpoint.adapters.spec import NpmPackage, PythonPackage

    package = agent_spec(agent).runtime
    if isinstance(package, NpmPackage):
        return npm_times(package.package)
    if isinstance(package, PythonPackage):
        return pypi_times(package.package)
    raise RuntimeError(f"{agent}: forkpoint installs no release of it")


def deps_date(stamp: object) -> str | None:
    """The ``UV_EXCLUDE_NEWER`` a PyPI release is installed with: a day after its publish time, so it gets the
    dependencies a user installing it that day got (openhands-ai 1.3.0 with today's ``mcp`` cannot import
    ``McpError``) and still its lockstep companions (openhands-tools, published minutes after the SDK)."""
    when = _when(stamp)
    return (when + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ") if when is not None else None


def sample_for(agent: str, sample: int | None) -> int | None:
    """The sample size of ``agent``: the one asked for, else every release (npm) or :data:`PYPI_SAMPLE` (PyPI)."""
    from forkpoint.adapters import agent_spec
    from forkpoint.adapters.spec import PythonPackage

    if sample is not None:
        return sample
    return PYPI_SAMPLE if isinstance(agent_spec(agent).runtime, PythonPackage) else None


# -- one release (the worker) ----------------------------------------------------------------------------------


def worker(target: str, prune: bool = False) -> dict[str, Any]:
    """Install ``AGENT@VERSION`` into the runtime cache, then calibrate it into ``$FORKPOINT_CALIBRATIONS``:
    the record of both steps (printed by ``versions.py --sweep-one``). ``prune``: remove the install afterwards
    when this worker made it (a full sweep would otherwise leave ~350 MB per release)."""
    from forkpoint import runtimes
    from forkpoint.adapters import calibration

    agent, version = calibration.check_target(target)
    made = runtimes.find(agent, version) is None
    try:
        return _install_and_calibrate(target, agent, version)
    finally:
        found = runtimes.find(agent, version) if prune and made else None
        if found is not None:
            import shutil

            shutil.rmtree(found.root, ignore_errors=True)


def _install_and_calibrate(target: str, agent: str, version: str) -> dict[str, Any]:
    from forkpoint import runtimes
    from forkpoint.adapters.calibrate import calibrate
    from forkpoint.core.errors import ReplayError

    started = time.monotonic()
    try:
        runtime = runtimes.install_release(agent, version)
        reported = runtimes.probe_version(runtime)
    except ReplayError as error:
        return {"installed": False, "reason": f"{error.kind.category}: {error.message}"[:400],
                "install_s": round(time.monotonic() - started, 1)}
    if reported != version:
        return {"installed": False, "reason": f"the installed release reports {reported[:60]!r}",
                "install_s": round(time.monotonic() - started, 1)}
    install_s = round(time.monotonic() - started, 1)
    try:
        outcome = calibrate(target, install=lambda _agent, _version: runtime.entrypoint)
    except ReplayError as error:
        return {"installed": True, "install_s": install_s, "error": f"{error.kind.category}: {error.message}"[:400]}
    return {"installed": True, "install_s": install_s, "ok": outcome.ok, "maps_to": outcome.maps_to,
            "reason": outcome.reason, "checks": [c.to_json() for c in outcome.checks]}


def classify(record: Mapping[str, Any]) -> tuple[str, str]:
    """(class, detail) of one release's record: see the module docstring for the classes."""
    if record.get("verified"):
        return "verified", "a shipped profile"
    if record.get("pending"):
        return "pending", "not run yet"
    if record.get("timeout"):
        return "unnamed", f"did not finish within {record['timeout']:g} s (killed)"
    if record.get("installed") is False:
        reason = " ".join(str(record.get("reason") or "").split())
        if reason.startswith(INSTALL_BUG) and not NO_BUILD.search(reason):
            return "unnamed", f"install: {reason}"
        missing = re.search(r"No matching version found for \S+", reason)  # npm's own words, not its log
        return "not-installed", missing[0].rstrip(".") if missing else reason
    if record.get("crash"):
        return "unnamed", f"worker crashed: {record['crash']}"
    if record.get("error"):
        return "unnamed", str(record["error"])
    if record.get("ok"):
        return "calibrated", f"as {record.get('maps_to')}"
    checks = [c for c in record.get("checks") or [] if isinstance(c, dict)]
    failed = next((c for c in checks if not c.get("ok")), None)
    if failed is None:
        return "unnamed", str(record.get("reason") or "failed with no failing check")
    against = f" against {failed['against']}" if failed.get("against") else ""
    detail = f"{failed.get('check')}{against}: {failed.get('detail')}"
    text = str(failed.get("detail"))
    named = (failed.get("check") in NAMED_CHECKS and not text.startswith(NOT_NAMED)) \
        or (failed.get("check") == "record" and text.startswith(NAMED_RECORD))
    return ("named" if named else "unnamed"), detail


def load_results(store: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The sweep's records so far (the last one of each release wins)."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    path = store / RESULTS
    if not path.is_file():
        return found
    for raw in path.read_text("utf-8").splitlines():
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("agent"), str) and isinstance(record.get("version"), str):
            found[(record["agent"], record["version"])] = record
    return found


def stored_record(store: Path, agent: str, version: str) -> dict[str, Any] | None:
    """The record of a release calibrated into ``store`` outside a sweep (a profile or a failure marker)."""
    for name, ok in ((f"{version}.json", True), (f"{version}.failed.json", False)):
        path = store / agent / name
        if path.is_file() and not path.is_symlink():
            try:
                data = json.loads(path.read_text("utf-8"))
            except ValueError:
                continue
            if isinstance(data, dict):
                return {"installed": True, "ok": ok, "maps_to": data.get("maps_to"), "reason": data.get("reason"),
                        "checks": data.get("checked") or []}
    return None


def _append(store: Path, record: Mapping[str, Any]) -> None:
    store.mkdir(parents=True, exist_ok=True)
    with (store / RESULTS).open("a", encoding="utf-8") as handle:
        handle.write(json.dumps(record, ensure_ascii=False) + "\n")


def run_one(target: str, store: Path, deadline: float, script: Path, env: Mapping[str, str],
            prune: bool = False) -> dict[str, Any]:
    """One worker process under ``deadline`` (killed with its process group past it): its record."""
    started = time.monotonic()
    argv = [sys.executable, str(script), "--sweep-one", target, *(["--prune"] if prune else [])]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            stdin=subprocess.DEVNULL, env={**env, "FORKPOINT_CALIBRATIONS": str(store)})
    try:
        out, err = proc.communicate(timeout=deadline)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"timeout": deadline, "wall_s": round(time.monotonic() - started, 1)}
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # anything the worker left behind in its group
    lines = [line for line in out.splitlines() if line.startswith("{")]
    try:
        record: dict[str, Any] = json.loads(lines[-1])
    except (IndexError, ValueError):
        record = {"crash": f"exit {proc.returncode}: {err.strip()[-300:]}"}
    record["wall_s"] = round(time.monotonic() - started, 1)
    return record


def interleave(chosen: Mapping[str, list[str]]) -> list[tuple[str, str]]:
    """The run order: one release of each agent in turn, newest first within an agent (a sweep cut short still
    covers every agent)."""
    queues = {agent: list(reversed(versions)) for agent, versions in chosen.items()}
    order: list[tuple[str, str]] = []
    while any(queues.values()):
        for agent, queue in queues.items():
            if queue:
                order.append((agent, queue.pop(0)))
    return order


def sweep(agents: Iterable[str], since: datetime, sample: int | None, store: Path, deadline: float, script: Path,
          say: Callable[[str], None], *, run: bool = True, prune: bool = False, retry: bool = False,
          until: datetime | None = None) \
        -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, list[str]], dict[str, dict[str, str]]]:
    """Calibrate the chosen releases of ``agents`` published in ``[since, until)`` one at a time into ``store``
    (``run``: else only choose; ``retry``: run again the releases whose record is ``unnamed``);
    (chosen, window, backfills, publish dates) per agent. Records go to ``<store>/sweep.jsonl`` as they come."""
    from forkpoint.adapters import agent_spec

    chosen: dict[str, list[str]] = {}
    backfills: dict[str, list[str]] = {}
    published: dict[str, dict[str, str]] = {}
    windows: dict[str, list[str]] = {}
    deps_as_of: dict[str, dict[str, str]] = {}
    for agent in agents:
        times = registry_times(agent)
        chosen[agent] = choose_releases(times, since, sample_for(agent, sample), until)
        if sample_for(agent, None) is not None:  # a PyPI agent: its dependencies as of its release
            deps_as_of[agent] = {v: when for v in chosen[agent] if (when := deps_date(times.get(v))) is not None}
        windows[agent], backfills[agent] = releases_in_window(times, since, until)
        published[agent] = {v: str(times[v])[:10] for v in windows[agent]}
        span = f"since {since:%Y-%m-%d}" + (f" before {until:%Y-%m-%d}" if until else "")
        say(f"{agent}: {len(windows[agent])} releases {span} "
            f"({len(backfills[agent])} backfills left out), chosen {len(chosen[agent])}: {' '.join(chosen[agent])}")
    done = load_results(store)
    env = dict(os.environ)
    for agent, version in interleave(chosen) if run else []:
        record = done.get((agent, version)) or stored_record(store, agent, version)
        if version in agent_spec(agent).versions or (record is not None and not (
                retry and classify(record)[0] == "unnamed")):
            continue
        say(f"{agent}@{version}: running ...")
        as_of = deps_as_of.get(agent, {}).get(version)
        record = {"agent": agent, "version": version, "at": datetime.now(UTC).isoformat(timespec="seconds"),
                  **({"deps_as_of": as_of} if as_of else {}),
                  **run_one(f"{agent}@{version}", store, deadline, script,
                            {**env, "UV_EXCLUDE_NEWER": as_of} if as_of else env, prune)}
        _append(store, record)
        kind, detail = classify(record)
        say(f"{agent}@{version}: {kind} ({record['wall_s']} s): {' '.join(detail.split())[:300]}")
    return chosen, windows, backfills, published


def rows(chosen: Mapping[str, list[str]], windows: Mapping[str, list[str]], store: Path) -> list[dict[str, Any]]:
    """Per release chosen now or swept before (in the window), newest first: its record (``verified`` for a shipped
    version, ``pending`` when not run yet)."""
    from forkpoint.adapters import agent_spec

    done = load_results(store)
    found = []
    for agent, versions in chosen.items():
        swept = set(versions) | {v for v in windows.get(agent, []) if (agent, v) in done}
        for version in [v for v in reversed(windows.get(agent, versions)) if v in swept]:
            if version in agent_spec(agent).versions:
                record: dict[str, Any] = {"verified": True}
            else:
                record = done.get((agent, version)) or stored_record(store, agent, version) or {"pending": True}
            found.append({"agent": agent, "version": version, **record})
    return found
