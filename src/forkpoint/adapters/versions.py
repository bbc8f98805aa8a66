"""The three version questions, answered apart (issue 28).

(a) Can forkpoint READ a recording? Its adapter's parser decides by structure and names the format family
    (``AgentSpec.formats``); the version string is not consulted.
(b) Whose TOOL SEMANTICS re-run its calls? The nearest verified version of that family (``tool_version``): the
    greatest verified version not newer than the recorded one, else the oldest newer one, else the family's newest.
(c) Which BINARY continues it? Always a verified version (``continuing_version``): the recorded one when it is
    verified, else the newest version proven to continue recordings of ``tool_version`` (``cross_versions``).

A version the user calibrated (``forkpoint agents calibrate``, ``forkpoint.adapters.calibration``) is
``calibrated``: (b) is the verified version its calibration mapped it to, and it does not degrade the result.

A recorded version that is not verified degrades the result (``unverified_version``); it never refuses work unless
the user asks for the old exact-pin rule (``--require-verified-version``). The recorded version string comes from
the input: it is only ever a bounded, escaped label (``label``), never a path or an argument.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING

from forkpoint.adapters import calibration
from forkpoint.adapters.spec import AgentSpec, FormatFamily
from forkpoint.core.errors import configuration, unsupported_version
from forkpoint.core.model import Mode, Plan, Trajectory, VersionFacts
from forkpoint.core.releases import number

if TYPE_CHECKING:
    from forkpoint.adapters.base import Adapter

#: the quality reason a run of an unverified recorded version carries
UNVERIFIED = "unverified_version"
_LABEL_CHARS = 64


def label(version: str | None) -> str | None:
    """The recorded version as a display label: control and non-printable characters escaped, at most 64
    characters (a hostile recording can put anything in its version field)."""
    if version is None:
        return None
    shown = "".join(ch if ch.isprintable() else f"\\x{ord(ch):02x}" if ord(ch) < 256 else f"\\u{ord(ch):04x}"
                    for ch in version[:_LABEL_CHARS + 1])
    return shown if len(shown) <= _LABEL_CHARS else shown[:_LABEL_CHARS - 1] + "…"


def family_named(spec: AgentSpec, name: str) -> FormatFamily:
    family = next((f for f in spec.formats if f.name == name), None)
    if family is None:  # an adapter named a family its spec does not declare: a bug, not the user's input
        raise configuration(f"{spec.name} has no format family {name!r}")
    return family


def in_family(family: FormatFamily, version: str) -> bool:
    """Whether ``version`` lies in the range the family is known to cover (bounds inclusive)."""
    value = number(version)
    if value is None:
        return False
    low, high = number(family.oldest), number(family.newest)
    return (low is None or value >= low) and (high is None or value <= high)


def verified_in(spec: AgentSpec, family: FormatFamily) -> list[str]:
    """The verified versions of a family, oldest first."""
    return sorted((v for v in spec.versions if in_family(family, v)), key=lambda v: number(v) or (0, 0, 0))


def nearest(candidates: list[str], recorded: str | None) -> str:
    """The greatest candidate not newer than ``recorded``, else the oldest newer one; the newest when the
    recorded version has no number."""
    value = number(recorded)
    if value is None:
        return candidates[-1]
    older = [c for c in candidates if (number(c) or (0, 0, 0)) <= value]
    return older[-1] if older else candidates[0]


def resolve(spec: AgentSpec, trajectory: Trajectory, family_name: str) -> VersionFacts:
    """Answer (a) and (b) for a parsed recording (the parse succeeding is (a)'s yes)."""
    family = family_named(spec, family_name)
    candidates = verified_in(spec, family)
    if not candidates:
        raise unsupported_version(f"{spec.title} has no verified version of the {family.name} format "
                                  f"(verified: {', '.join(spec.versions)})")
    versions = sorted(trajectory.versions, key=lambda v: number(v) or (0, 0, 0))
    recorded = trajectory.version if trajectory.version is not None else (versions[-1] if versions else None)
    tool_version = nearest(candidates, recorded)
    shown = label(", ".join(versions) if len(versions) > 1 else recorded)
    if recorded is not None and len(versions) <= 1 and recorded in candidates:
        return VersionFacts(shown, "verified", family.name, recorded, spec.versions[recorded])
    calibrated = calibration.load(spec, recorded) if len(versions) <= 1 else None
    if calibrated is not None and calibrated.format_family == family.name and calibrated.maps_to in candidates:
        return VersionFacts(shown, "calibrated", family.name, calibrated.maps_to, spec.versions[calibrated.maps_to])
    if recorded is None:
        why = f"the recording names no {spec.title} version ({spec.version_field})"
    elif len(versions) > 1:
        why = f"the recording was written by several {spec.title} versions ({shown})"
    else:
        why = f"{spec.title} {shown} is not a verified version"
    notes = [f"{why}: read as {family.name}, its tools re-run with {tool_version}'s semantics"]
    if recorded is not None and len(versions) <= 1 and not in_family(family, recorded):
        notes.append(f"{shown} is outside the versions {family.name} is known to cover ({family.covers()})")
    return VersionFacts(shown, "unverified", family.name, tool_version, spec.versions[tool_version], tuple(notes))


def reachable(spec: AgentSpec, tool_version: str) -> list[str]:
    """The verified versions that continue a recording read as ``tool_version``: itself and its proven pairs."""
    return sorted({tool_version, *spec.cross_versions.get(tool_version, ())}, key=lambda v: number(v) or (0, 0, 0))


def continuing_version(spec: AgentSpec, facts: VersionFacts | None, requested: str | None,
                       tool_version: str | None) -> str | None:
    """Answer (c): None keeps the recording's own (verified) version; otherwise the version to continue with.
    Asking for the version a verified recording is read as is asking for its own (a Pi session names no version:
    ``--agent-version 0.83.0`` on it is no cross-version pair)."""
    if facts is None or facts.status == "verified" or tool_version is None:
        return None if requested is not None and facts is not None and requested == facts.tool_version else requested
    choices = reachable(spec, tool_version)
    if requested is None:
        return choices[-1]
    if requested not in choices:
        pairs = ", ".join(f"{tool_version} -> {v}" for v in choices if v != tool_version) or "none"
        raise unsupported_version(
            f"a {spec.title} {facts.recorded or '(unversioned)'} recording is read as {tool_version}; it can be "
            f"continued by {', '.join(choices)} (proven pairs: {pairs}), not {label(requested)}")
    return requested


def reasons(facts: VersionFacts | None) -> Iterable[str]:
    """The quality reasons the version contributes."""
    return (UNVERIFIED,) if facts is not None and facts.status == "unverified" else ()


def read_as(adapter: Adapter, parsed: Trajectory, *, require_verified: bool = False) -> tuple[Trajectory, VersionFacts]:
    """The recording as replay sees it: its version replaced by ``tool_version`` (executors, runtimes and envelope
    profiles all key on a verified version), with the facts that keep the recorded one. ``require_verified``:
    the exact-pin rule (unsupported_version for anything but a verified version)."""
    facts = adapter.version_facts(parsed)
    if require_verified:
        adapter.profile_for(parsed)  # the old refusal, with its message
        if facts.status != "verified":
            raise unsupported_version(f"{facts.reasons[0] if facts.reasons else 'the version is not verified'} "
                                      "(--require-verified-version)")
    if parsed.version == facts.tool_version or (facts.status == "verified" and parsed.version is not None):
        return parsed, facts
    # an unverified version, or a verified format that names no version (Pi): read as the tool version
    return replace(parsed, version=facts.tool_version, versions=frozenset({facts.tool_version})), facts


def plan_for(adapter: Adapter, parsed: Trajectory, after_step: int, mode: Mode, *,
             allow_stale_observations: bool = False, require_verified: bool = False,
             reuse_observations: tuple[str, ...] = (), mcp_servers: frozenset[str] = frozenset()) -> Plan:
    """The boundary plan of a recording of any readable version (forkpoint.run.plan.select_boundary)."""
    from forkpoint.run.plan import select_boundary

    readable, facts = read_as(adapter, parsed, require_verified=require_verified)
    plan = select_boundary(readable, after_step, mode, facts.profile, allow_stale_observations=allow_stale_observations,
                           reuse_observations=reuse_observations, mcp_servers=mcp_servers)
    return replace(plan, version=facts)


def launch_trajectory(spec: AgentSpec, plan: Plan, requested: str | None) -> Trajectory:
    """The trajectory ``prepare_launch`` sees: the continuing version's (forkpoint.runtimes.continued_by)."""
    from forkpoint.runtimes import continued_by

    return continued_by(plan.trajectory, continuing_version(spec, plan.version, requested, plan.trajectory.version))
