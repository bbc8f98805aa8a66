"""``forkpoint agents calibrate AGENT@VERSION``: prove an unshipped release behaves like a verified one (issue 28).

The release is installed into the runtime cache, driven by ScriptedModel through the agent's probe scenario (every
tool, parallel calls, a large output, an error; then a ``--resume``), and checked against each verified version of
its format family, nearest first:

* ``parse``: the agent's parser reads the native files it wrote, as the expected format family and version;
* ``tool_observations``: a replay-only of the recording with the candidate's tool semantics gives, call by call,
  exactly the observations the release recorded;
* ``resume_envelope``: the release's first request after ``--resume`` passes the bridge gate built with the
  candidate's envelope profile.

The first candidate passing all three is the one the version maps to; the profile is then written atomically
(``forkpoint.adapters.calibration``). Anything else writes the reason and the report, never the profile.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from forkpoint.adapters import agent_spec, calibration
from forkpoint.adapters.calibration import Outcome
from forkpoint.adapters.spec import AgentSpec
from forkpoint.adapters.versions import in_family
from forkpoint.core.errors import ErrorKind, ReplayError, configuration, unsupported_version
from forkpoint.core.releases import number

#: the agents with a calibration probe
CALIBRATED = ("claude-code", "codex", "copilot-cli", "gemini-cli", "mini-swe-agent", "opencode", "openhands",
              "openhands-sdk", "pi", "qwen-code")
#: agents that cannot be calibrated, and why (a refusal naming the reason, before anything is installed)
NOT_CALIBRATED = {
    "swe-agent": "SWE-agent 1.x is not on PyPI (the only `sweagent` release there is 0.0.1 of 2024-04-02, a "
                 "pre-1.0 snapshot; 1.x ships as git tags), so forkpoint cannot install a release to record against "
                 "ScriptedModel, and no SWE-agent binary continues a forkpoint session (there is no verified "
                 "continuation runner): a calibration could check neither its native .traj nor its resume. A .traj "
                 "of any readable version still prepares and replays, unverified, with 1.1.0's tool semantics (the "
                 "call-by-call comparison of --replay-only is the evidence)",
}
#: a probe per agent: (spec, runtime entrypoint, version, candidates, scratch dir, outcome) -> maps_to or None
Probe = Callable[[AgentSpec, Path, str, list[str], Path, Outcome], str | None]


def _probe_for(agent: str) -> Probe:
    if agent == "claude-code":
        from forkpoint.adapters.claude_code.calibrate import probe

        return probe
    if agent == "codex":
        from forkpoint.adapters.codex.calibrate import probe as codex_probe

        return codex_probe
    if agent == "mini-swe-agent":
        from forkpoint.adapters.mini_swe_agent.calibrate import probe as mini_probe

        return mini_probe
    if agent == "opencode":
        from forkpoint.adapters.opencode.calibrate import probe as opencode_probe

        return opencode_probe
    if agent == "pi":
        from forkpoint.adapters.pi.calibrate import probe as pi_probe

        return pi_probe
    if agent in ("copilot-cli", "gemini-cli", "openhands", "openhands-sdk", "qwen-code"):
        from importlib import import_module

        cli_probe: Probe = import_module(f"forkpoint.adapters.{agent.replace('-', '_')}.calibrate").probe
        return cli_probe
    if agent in NOT_CALIBRATED:
        raise ReplayError(ErrorKind.UNSUPPORTED_AGENT, f"{agent} cannot be calibrated: {NOT_CALIBRATED[agent]}")
    raise configuration(f"calibrating {agent} is not supported yet (supported: {', '.join(CALIBRATED)})")


def candidates(spec: AgentSpec, version: str) -> list[str]:
    """The verified versions a release is checked against, nearest (by release number) first."""
    value = number(version) or (0, 0, 0)
    family = [f for f in spec.formats if in_family(f, version)]
    pool = [v for v in spec.versions if any(in_family(f, v) for f in family)] if family else list(spec.versions)

    def distance(candidate: str) -> tuple[int, ...]:
        other = number(candidate) or (0, 0, 0)
        return tuple(abs(a - b) for a, b in zip(value, other, strict=True))

    return sorted(pool, key=distance)


def calibrate(target: str, *, against: str | None = None, install: Callable[[str, str], Path] | None = None,
              progress: Callable[[str], None] = lambda _: None) -> Outcome:
    """Calibrate ``AGENT@VERSION``; the profile is written only when every check passes against one candidate
    (``against``: only that verified version). ``install`` returns the release's entrypoint (default: the
    runtime cache, from npm)."""
    agent, version = calibration.check_target(target)  # before anything is installed or any path is built
    spec = agent_spec(agent)
    if version in spec.versions:
        raise configuration(f"{agent} {version} is verified already; nothing to calibrate")
    if against is not None and against not in spec.versions:
        raise configuration(f"--against must name a verified {agent} version ({', '.join(spec.versions)})")
    probe = _probe_for(agent)
    tried = [against] if against is not None else candidates(spec, version)
    outcome = Outcome(agent, version)
    with tempfile.TemporaryDirectory(prefix="forkpoint-calibrate-") as scratch:
        try:
            progress(f"installing {agent}@{version} ...")
            entrypoint = (install or _install)(agent, version)
            outcome.maps_to = probe(spec, entrypoint, version, tried, Path(scratch), outcome)
            if outcome.maps_to is None and outcome.reason is None:
                outcome.reason = "no verified profile matched (see the checks)"
        except ReplayError as error:
            outcome.reason = error.message
    _store(outcome)
    return outcome


def _install(agent: str, version: str) -> Path:
    from forkpoint import runtimes

    runtime = runtimes.install_release(agent, version)
    probed = runtimes.probe_version(runtime)
    if probed != version:
        raise unsupported_version(f"the installed {agent} reports {calibration_label(probed)}, expected {version}")
    return runtime.entrypoint


def calibration_label(text: str) -> str:
    from forkpoint.adapters.versions import label

    return label(text) or ""


def _store(outcome: Outcome) -> None:
    """Success: the profile (atomically), the report and the probe's recording (``<version>.probe/``), the failure
    marker removed. Failure: the marker, the report and ``<version>.failed-probe/``; an earlier profile and its
    recording stay."""
    path = calibration.profile_path(outcome.agent, outcome.version)
    calibration.write_atomically(calibration.report_path(outcome.agent, outcome.version), outcome.report())
    failed = calibration.failed_path(outcome.agent, outcome.version)
    if outcome.evidence:
        calibration.write_folder(calibration.evidence_path(outcome.agent, outcome.version, outcome.ok),
                                 outcome.evidence)
    if not outcome.ok:
        calibration.write_atomically(failed, json.dumps({
            "schema": calibration.SCHEMA, "status": "failed", "agent": outcome.agent, "version": outcome.version,
            "reason": outcome.reason, "checked": [c.to_json() for c in outcome.checks],
            "calibrated_at": calibration.now()}, indent=2) + "\n")
        return
    spec = agent_spec(outcome.agent)
    assert outcome.maps_to is not None
    calibration.write_atomically(path, json.dumps({
        "schema": calibration.SCHEMA, "status": "calibrated", "agent": outcome.agent, "version": outcome.version,
        "format_family": outcome.family, "maps_to": outcome.maps_to, "profile": spec.versions[outcome.maps_to],
        **({"tool_profile": outcome.tool_profile} if outcome.tool_profile else {}),
        "checked": [c.to_json() for c in outcome.checks], "calibrated_at": calibration.now()}, indent=2) + "\n")
    failed.unlink(missing_ok=True)
