"""forkpoint.adapters.versions: the three version questions (read / tool semantics / continuing binary), issue 28."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from forkpoint.adapters import AGENTS, agent_spec, get_adapter
from forkpoint.adapters.versions import continuing_version, label, nearest, plan_for, read_as, verified_in
from forkpoint.core.errors import ErrorKind, ReplayError
from forkpoint.core.model import Mode, VersionFacts
from forkpoint.core.releases import number
from forkpoint.testing.claude_sessions import simple_session

FIXTURES = Path(__file__).parents[1] / "fixtures"


def test_every_verified_version_belongs_to_one_of_its_agents_families() -> None:
    for name in AGENTS:
        spec = agent_spec(name)
        assert spec.formats, name
        covered = [v for family in spec.formats for v in verified_in(spec, family)]
        assert sorted(covered) == sorted(spec.versions), name


@pytest.mark.parametrize(("recorded", "expected"), [("2.0.27", "2.1.220"), ("1.0.98", "2.1.220"),
                                                    ("2.1.300", "2.1.220"), ("2.1.400", "2.1.332"),
                                                    ("2.1.332", "2.1.332"), (None, "2.1.332"), ("weird", "2.1.332")])
def test_nearest_verified_version(recorded: str | None, expected: str) -> None:
    assert nearest(["2.1.220", "2.1.332"], recorded) == expected


def test_version_numbers() -> None:
    assert number("v1.2") == (1, 2, 0) and number("2.1.0-beta.3") == (2, 1, 0) and number("x") is None


def test_label_escapes_and_bounds() -> None:
    assert label("2.0.1\x1b[31m\x00") == "2.0.1\\x1b[31m\\x00"
    assert len(label("9" * 10_000) or "") == 64 and (label("9" * 10_000) or "").endswith("…")
    assert label(None) is None and label("2.0.27") == "2.0.27"


def test_claude_recording_of_an_old_release_reads_as_the_nearest_verified(tmp_path: Path) -> None:
    path = simple_session(2, version="2.0.27").write(tmp_path / "s.jsonl")
    adapter = get_adapter("claude-code")
    readable, facts = read_as(adapter, adapter.parse(path))
    assert (facts.recorded, facts.status, facts.tool_version) == ("2.0.27", "unverified", "2.1.220")
    assert readable.version == "2.1.220" and facts.reasons and "2.0.27" in facts.reasons[0]
    with pytest.raises(ReplayError) as refused:
        read_as(adapter, adapter.parse(path), require_verified=True)
    assert refused.value.kind is ErrorKind.UNSUPPORTED_VERSION and "2.0.27" in refused.value.message


def test_mini_swe_agent_family_decides_the_profile(tmp_path: Path) -> None:
    """A 1.15.0 recording of the mini-swe-agent-1 format is read with 1.17.5, never with 2.4.6 (newer but another
    format); a recorded version whose format is the other family's is not verified."""
    adapter = get_adapter("mini-swe-agent")
    data = json.loads((FIXTURES / "mini_swe_agent" / "1.17.5" / "basic" / "trajectory.traj.json").read_text())
    data["info"]["mini_version"] = "1.15.0"
    old = tmp_path / "old.traj.json"
    old.write_text(json.dumps(data))
    facts = adapter.version_facts(adapter.parse(old))
    assert (facts.status, facts.format_family, facts.tool_version) == ("unverified", "mini-swe-agent-1", "1.17.5")
    data["info"]["mini_version"] = "1.99.0"  # newer than the family is known to cover
    old.write_text(json.dumps(data))
    facts = adapter.version_facts(adapter.parse(old))
    assert facts.tool_version == "1.17.5" and any("outside" in note for note in facts.reasons)


def test_a_recording_without_a_version_reads_as_the_newest_of_its_family(tmp_path: Path) -> None:
    adapter = get_adapter("openhands")
    events = json.loads((FIXTURES / "openhands" / "0.62.0").glob("*/trajectory.json").__next__().read_text())
    without = [event for event in events if not (isinstance(event, dict) and event.get("action") == "system")]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(without))
    plan = plan_for(adapter, adapter.parse(path), 1, Mode.PREPARE_ONLY)
    assert plan.version is not None
    assert (plan.version.recorded, plan.version.status, plan.trajectory.version) == (None, "unverified", "0.62.0")


def test_the_continuing_version() -> None:
    spec = agent_spec("claude-code")
    unverified = VersionFacts("2.0.27", "unverified", "claude-code/session-jsonl", "2.1.220", "p")
    verified = VersionFacts("2.1.220", "verified", "claude-code/session-jsonl", "2.1.220", "p")
    assert continuing_version(spec, unverified, None, "2.1.220") == "2.1.332"  # the newest proven
    assert continuing_version(spec, unverified, "2.1.220", "2.1.220") == "2.1.220"
    assert continuing_version(spec, verified, None, "2.1.220") is None  # its own version
    with pytest.raises(ReplayError) as refused:
        continuing_version(spec, unverified, "9.9.9", "2.1.220")
    assert refused.value.kind is ErrorKind.UNSUPPORTED_VERSION and "2.1.220 -> 2.1.332" in refused.value.message


def test_a_session_written_by_several_versions_is_unverified(tmp_path: Path) -> None:
    """A session resumed across an upgrade names each version on its lines: read as the nearest verified version
    of the newest, never claimed verified (the exact-pin rule refuses it)."""
    builder = simple_session(1, version="2.1.220")
    builder.version = "2.1.332"
    builder.user_prompt("Again.")
    path = builder.write(tmp_path / "mixed.jsonl")
    adapter = get_adapter("claude-code")
    parsed = adapter.parse(path)
    facts = adapter.version_facts(parsed)
    assert (facts.recorded, facts.status, facts.tool_version) == ("2.1.220, 2.1.332", "unverified", "2.1.332")
    with pytest.raises(ReplayError):
        read_as(adapter, parsed, require_verified=True)


def test_asking_a_versionless_verified_recording_for_its_own_version_is_no_cross_version_pair() -> None:
    """A Pi session names no Pi version and reads as verified 0.83.0 (its format's version, which the plan's
    trajectory then carries): ``--agent-version 0.83.0`` continues it with 0.83.0 (it was refused as the unproven
    pair '' -> 0.83.0)."""
    from forkpoint.adapters.versions import launch_trajectory

    adapter = get_adapter("pi")
    parsed = adapter.parse(FIXTURES / "pi" / "0.83.0" / "parallel" / "session.jsonl")
    plan = plan_for(adapter, parsed, 1, Mode.REPLAY_AND_CONTINUE)
    assert plan.version is not None and (plan.version.recorded, plan.version.status) == (None, "verified")
    assert launch_trajectory(agent_spec("pi"), plan, "0.83.0").version == "0.83.0"
    assert continuing_version(agent_spec("pi"), plan.version, "0.83.0", None) is None
