"""Writing a prepared prefix never alters the parsed trajectory (prefixes avoid deep copies on that path).

One parse serves every boundary of an ``inspect`` or a benchmark; a prefix writer that edited the parsed native
data in place would leak one boundary's prefix into the next. Each adapter's committed recordings are parsed once,
every boundary is prepared twice in a row, and the parsed native data must equal a fresh parse.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from forkpoint.adapters import get_adapter
from forkpoint.adapters.versions import read_as
from forkpoint.core.model import Mode
from forkpoint.run import plan as planning

FIXTURES = Path(__file__).parents[1] / "fixtures"
RECORDINGS = {
    "claude-code": "claude_code/*/*/session.jsonl",
    "codex": "codex/*/*/rollout.jsonl",
    "pi": "pi/*/*/events.jsonl",
    "opencode": "opencode/*/*/export.json",
    "mini-swe-agent": "mini_swe_agent/*/*/trajectory.traj.json",
    "openhands": "openhands/*/*/trajectory.json",
    "openhands-sdk": "openhands-sdk/*/*/conversation/base_state.json",
    "swe-agent": "swe_agent/*/*/*.traj",
}
#: recordings whose every boundary is refused by design (batch 1 calls a tool the adapter cannot replay); Pi's
#: unknown_tool is no longer one: Pi's own "Tool glob not found" answer is reproduced
ALL_REFUSED: set[Path] = set()
CASES = [(agent, path) for agent, pattern in RECORDINGS.items() for path in sorted(FIXTURES.glob(pattern))
         if path not in ALL_REFUSED]


def _native_state(native: object) -> object:
    """The parsed native data as plain values (dataclasses and objects by their fields)."""
    return copy.deepcopy(getattr(native, "__dict__", native))


IDS = [f"{agent}-{path.parent.parent.name}-{path.parent.name}" for agent, path in CASES]


@pytest.mark.parametrize(("agent", "path"), CASES, ids=IDS)
def test_preparing_every_boundary_leaves_the_parse_untouched(agent: str, path: Path, tmp_path: Path) -> None:
    adapter = get_adapter(agent)
    parsed = adapter.parse(path)
    before = _native_state(parsed.native)
    readable, facts = read_as(adapter, parsed)  # an unverified version (claude-code 2.0.27) is read as its nearest
    profile = facts.profile
    written: dict[int, bytes] = {}
    for after in range(1, parsed.complete_count + 1):
        if after in parsed.boundary_refusals:
            continue
        try:
            plan = planning.select_boundary(readable, after, Mode.PREPARE_ONLY, profile, allow_stale_observations=True)
        except Exception:  # a boundary this recording cannot prepare (refused call): not this test's subject
            continue
        for attempt in ("a", "b"):
            prefix = adapter.write_prepared_prefix(plan, tmp_path / f"{after}{attempt}")
            data = prefix.path.read_bytes()
            assert written.setdefault(after, data) == data  # the same bytes again: nothing leaked between runs
    assert written, f"no boundary of {path} could be prepared"
    assert _native_state(parsed.native) == before
    assert _native_state(adapter.parse(path).native) == before
